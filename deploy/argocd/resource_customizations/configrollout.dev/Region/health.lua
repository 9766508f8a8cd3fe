-- Health of a configrollout.dev/v1alpha1 Region: whether the controller's last probe reached
-- its API server. The controller follows kstatus (status.observedGeneration, Ready, Stalled).
local hs = {}
if obj.status == nil or obj.status.observedGeneration == nil or
    (obj.metadata.generation ~= nil and obj.status.observedGeneration < obj.metadata.generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the configrollout controller to probe the region"
  return hs
end
if obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    if c.type == "Stalled" and c.status == "True" then
      hs.status = "Degraded"
      hs.message = c.message
      return hs
    end
    if c.type == "Ready" and c.status == "True" then
      hs.status = "Healthy"
      hs.message = c.message
      return hs
    end
  end
end
if obj.status.reachable == false then
  hs.status = "Degraded"
  hs.message = "The region's API server does not answer"
  return hs
end
hs.status = "Progressing"
hs.message = "Waiting for the configrollout controller to probe the region"
return hs
