-- Approves the stage the rollout awaits, as `kubectl configrollout approve` does: a
-- StageApproval naming the rollout's UID, the stage with the digest of what it does, and the
-- revision with its digest, as the status reports them.
--
-- Argo CD (2.8 or newer) creates it with its own credentials for the cluster, never as the
-- Argo CD user who runs the action: the server's ServiceAccount for the cluster Argo CD runs
-- in, the cluster Secret's identity for another one (`argocd cluster add`: argocd-manager),
-- or the AppProject's destination ServiceAccount when sync impersonation is on. The
-- apiserver refuses a StageApproval whose spec.approver is not who creates it
-- (policies/stageapproval-approver.yaml), so set `approver` to that identity. The person is
-- named by Argo CD's audit Events (ResourceActionRan, in Argo CD's namespace) and log.
local approver = "system:serviceaccount:argocd:argocd-server"

local status = obj.status
if status == nil or status.phase ~= "AwaitingApproval" or status.currentStage == nil or status.revision == nil then
  error("the rollout is not waiting for an approval")
end
local digest = nil
if status.history ~= nil then
  for _, record in ipairs(status.history) do
    if record.name == status.revision then
      digest = record.digest
    end
  end
end
if digest == nil then
  error("the rollout's status names no digest for revision " .. status.revision)
end
if status.currentStageDigest == nil then
  error("the rollout's status names no digest for stage " .. status.currentStage .. " (a controller older than the approve action)")
end

local approval = {}
approval.apiVersion = "configrollout.dev/v1alpha1"
approval.kind = "StageApproval"
approval.metadata = {}
approval.metadata.generateName = obj.metadata.name .. "-" .. status.currentStage .. "-" .. status.revision .. "-"
approval.metadata.namespace = obj.metadata.namespace
approval.spec = {}
approval.spec.rollout = obj.metadata.name
approval.spec.rolloutUID = obj.metadata.uid
approval.spec.stage = status.currentStage
approval.spec.revision = status.revision
approval.spec.revisionDigest = digest
approval.spec.stageDigest = status.currentStageDigest
approval.spec.approver = approver
approval.spec.reason = "approved with Argo CD's approve action (Argo CD's ResourceActionRan Events name who ran it)"

local created = {}
created.operation = "create"
created.resource = approval
return { created }
