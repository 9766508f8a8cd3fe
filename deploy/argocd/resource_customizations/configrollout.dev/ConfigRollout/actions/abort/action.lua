-- Aborts the rollout where it is (Halted, reason Aborted), as `kubectl configrollout abort`:
-- the request is the annotation's time, acted on once.
local os = require("os")
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["configrollout.dev/abort"] = os.date("!%Y-%m-%dT%H:%M:%SZ")
return obj
