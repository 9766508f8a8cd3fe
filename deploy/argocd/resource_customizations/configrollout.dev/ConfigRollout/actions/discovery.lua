-- Actions on a configrollout.dev/v1alpha1 ConfigRollout, enabled when the controller would act
-- on them (as `kubectl configrollout approve|abort|retry|pause|resume` do).
local actions = {}
local phase = nil
if obj.status ~= nil then
  phase = obj.status.phase
end
local paused = obj.spec.paused == true
local finished = phase == "Complete" or phase == "Halted" or phase == "RolledBack"

-- Argo CD creates the StageApproval as its own identity, not as the person who clicks: with
-- four-eyes that identity is no second person, so such rollouts are approved with
-- `kubectl configrollout approve`.
actions["approve"] = {
  ["disabled"] = phase ~= "AwaitingApproval" or obj.spec.fourEyes == true,
  ["displayName"] = "Approve stage",
  ["iconClass"] = "fa fa-fw fa-check"
}
actions["abort"] = {
  ["disabled"] = finished,
  ["iconClass"] = "fa fa-fw fa-stop"
}
actions["retry"] = {
  ["disabled"] = phase ~= "Halted",
  ["iconClass"] = "fa fa-fw fa-redo"
}
actions["pause"] = {
  ["disabled"] = paused,
  ["iconClass"] = "fa fa-fw fa-pause-circle"
}
actions["resume"] = {
  ["disabled"] = not paused,
  ["iconClass"] = "fa fa-fw fa-play-circle"
}
return actions
