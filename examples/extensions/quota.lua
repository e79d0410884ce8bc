-- Quota enforcement (EZK paper, section 5.2), owning the virtual node it is
-- registered at (say /memory-quota) and guarding a regular node (there,
-- /memory: see below), whose data is the free amount as a decimal string.
--
-- setData /memory-quota <amount>: allocates <amount> (a decimal integer;
--   negative releases) by lowering /memory's free amount, atomically.
--   Fails with QuotaExceeded (-125), changing nothing, only when the free
--   amount is short. A malformed amount fails with BadArguments.
-- getData / exists /memory-quota: the data and stat of /memory.
-- Anything else on /memory-quota: Unimplemented.

-- Registered at any path P: P is the virtual node, and the node it guards
-- is P without its "-quota" ending (/memory-quota guards /memory,
-- /jobs/cpu-quota guards /jobs/cpu), or P .. "-free" when P has none.
local QUOTA = EXTENSION.path
local MEMORY = QUOTA:match("^(.+)%-quota$") or (QUOTA .. "-free")

-- A decimal integer (optional sign, surrounding spaces); "1.5", "1e3" and
-- values beyond 64 bits are not amounts.
local function integer(s)
  if not s:match("^%s*[-+]?%d+%s*$") then return nil end
  return math.tointeger(tonumber(s))
end

return function(req, zk)
  if req.path ~= QUOTA then zk.fail("NoNode") end
  if req.op == "setData" then
    local amount = integer(req.data)
    if amount == nil then zk.fail("BadArguments") end
    local data, stat = zk.get(MEMORY)
    local free = integer(data)
    if free == nil then zk.fail("DataInconsistency") end
    if free < amount then zk.fail("QuotaExceeded") end
    return { stat = zk.set(MEMORY, tostring(free - amount), stat.version) }
  elseif req.op == "getData" then
    local data, stat = zk.get(MEMORY)
    return { data = data, stat = stat }
  elseif req.op == "exists" then
    local _, stat = zk.get(MEMORY)
    return { stat = stat }
  end
  zk.fail("Unimplemented")
end
