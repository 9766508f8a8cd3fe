-- Resumes a halted rollout from its failed stage, as `kubectl configrollout retry`: the request
-- is the annotation's time, acted on once and only for a halt that happened before it.
local os = require("os")
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["configrollout.dev/retry"] = os.date("!%Y-%m-%dT%H:%M:%SZ")
return obj
