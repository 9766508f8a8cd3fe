-- Lets a paused rollout go on.
obj.spec.paused = false
return obj
