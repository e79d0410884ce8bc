-- Barrier, owning the virtual node it is registered at (say /barrier; any
-- path works, and each registration has barriers of its own).
--
-- create /barrier/<b> with data N (a positive integer): a barrier for N members.
-- create /barrier/<b>/<member>: joins. The join that brings the membership
--   to N also creates /barrier/<b>/ready in the same transaction, so waiters
--   watch for /barrier/<b>/ready. Late joiners of an open barrier are still
--   added. The member name "ready" is reserved (BadArguments), and so is a
--   missing or non-positive N.
-- delete /barrier/<b>/<member>: leaves (the barrier stays open once opened).
-- setData /barrier/<b> N: changes the size (a positive integer, else
--   BadArguments); if N members are in already, ready is created in the
--   same transaction.
-- Waiters: exists /barrier/<b>/ready with a watch. A barrier that opened
--   before the watch was set shows in the reply (no lost wake-up); one that
--   opens later fires the watch. Members that join ephemerally and whose
--   session ends before the barrier opens no longer count.

local ROOT = EXTENSION.path
-- The path as a Lua pattern matching itself (its punctuation escaped).
local ROOT_PATTERN = ROOT:gsub("%p", "%%%0")
local READY = "ready"

-- Creates ready if the barrier has its N members and is not open yet.
local function open_if_full(zk, barrier)
  local size = math.tointeger(tonumber((zk.get(barrier))))
  local ready = barrier .. "/" .. READY
  if size and not zk.exists(ready) then
    local joined = 0
    for _, name in ipairs(zk.children(barrier)) do
      if name ~= READY then joined = joined + 1 end
    end
    if joined >= size then zk.create(ready, "") end
  end
end

return {
  setData = function(req, zk)
    if not req.path:match("^" .. ROOT_PATTERN .. "/[^/]+$") then return zk.default(req) end
    local n = math.tointeger(tonumber(req.data))
    if n == nil or n < 1 then zk.fail("BadArguments") end
    zk.default(req)
    open_if_full(zk, req.path)
    local _, stat = zk.get(req.path)
    return { stat = stat }
  end,

  create = function(req, zk)
    if not zk.exists(ROOT) then zk.create(ROOT, "") end
    local b = req.path:match("^" .. ROOT_PATTERN .. "/([^/]+)$")
    if b then
      local n = math.tointeger(tonumber(req.data))
      if n == nil or n < 1 then zk.fail("BadArguments") end
      return zk.default(req)
    end
    local barrier, member = req.path:match("^(" .. ROOT_PATTERN .. "/[^/]+)/([^/]+)$")
    if not barrier or member == READY then zk.fail("BadArguments") end
    local reply = zk.default(req)
    open_if_full(zk, barrier)
    return reply
  end,
}
