-- Holds the rollout: nothing new is published while spec.paused is true.
obj.spec.paused = true
return obj
