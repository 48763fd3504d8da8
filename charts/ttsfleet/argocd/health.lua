-- Argo CD health check for ttsfleet.io/TTSService (argocd-cm:
-- resource.customizations.health.ttsfleet.io_TTSService). Reads only the status
-- the operator writes: observedGeneration, the standard conditions, status.canary.
local hs = {status = "Progressing", message = "Waiting for the operator"}
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
if obj.metadata.generation ~= nil and obj.status.observedGeneration ~= obj.metadata.generation then
  hs.message = "Waiting for the operator to observe generation " .. tostring(obj.metadata.generation)
  return hs
end
local byType = {}
for _, condition in ipairs(obj.status.conditions) do
  byType[condition.type] = condition
end
local function text(condition)
  if condition.message ~= nil and condition.message ~= "" then
    return condition.reason .. ": " .. condition.message
  end
  return condition.reason
end
local degraded = byType["Degraded"]
if degraded ~= nil and degraded.status == "True" then
  return {status = "Degraded", message = text(degraded)}
end
if obj.status.canary ~= nil and obj.status.canary.phase == "Paused" then
  return {status = "Suspended", message = "Canary paused: " .. (obj.status.canary.message or "")}
end
local canary = byType["CanaryProgressing"]
if canary ~= nil and canary.status == "True" then
  return {status = "Progressing", message = text(canary)}
end
local progressing = byType["Progressing"]
if progressing ~= nil and progressing.status == "True" then
  return {status = "Progressing", message = text(progressing)}
end
local ready = byType["Ready"]
if ready ~= nil and (ready.status == "True" or ready.reason == "ScaledToZero") then
  return {status = "Healthy", message = text(ready)}
end
if ready ~= nil then
  hs.message = text(ready)
end
return hs
