-- Health of a configrollout.dev/v1alpha1 ConfigRollout.
--
-- The controller follows kstatus (sigs.k8s.io/cli-utils/pkg/kstatus): status.observedGeneration,
-- and the conditions Ready, Reconciling and Stalled (abnormal-true), whose messages say what the
-- rollout waits on or why it stopped. status.phase tells Argo CD's states apart:
--   Complete                                  Healthy
--   Pending, Progressing                      Progressing
--   AwaitingApproval, Paused                  Suspended (a person or spec.paused must act)
--   RollingBack, Halted, RolledBack, refused  Degraded (the revision failed)
-- Only the base and table libraries are used, so it runs with Argo CD's default sandbox.
local hs = {}

local function condition(kind)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function holds(kind)
  local c = condition(kind)
  return c ~= nil and c.status == "True"
end

local function message(kind, otherwise)
  local c = condition(kind)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return otherwise
end

if obj.status == nil or obj.status.observedGeneration == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the configrollout controller to look at the rollout"
  return hs
end
local generation = obj.metadata.generation
if generation ~= nil and obj.status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the configrollout controller to observe generation " .. generation ..
    " (status is of generation " .. obj.status.observedGeneration .. ")"
  return hs
end

local phase = obj.status.phase
if holds("Stalled") or holds("InvalidSpec") then
  hs.status = "Degraded"
  hs.message = message("Stalled", message("InvalidSpec", "The rollout cannot go on"))
  return hs
end
if phase == "Complete" then
  hs.status = "Healthy"
  hs.message = message("Ready", "The current revision passed every stage")
  return hs
end
if phase == "Halted" or phase == "RolledBack" then
  hs.status = "Degraded"
  hs.message = message("Halted", "The rollout stopped: " .. phase)
  return hs
end
if phase == "RollingBack" then
  hs.status = "Degraded"
  hs.message = message("Reconciling", message("Halted", "The revision is being rolled back"))
  return hs
end
if phase == "AwaitingApproval" or phase == "Paused" then
  hs.status = "Suspended"
  hs.message = message("Reconciling", message("AwaitingApproval", "The rollout waits: " .. phase))
  return hs
end
hs.status = "Progressing"
hs.message = message("Reconciling", "Waiting for the rollout to progress")
return hs
