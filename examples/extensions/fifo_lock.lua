-- FIFO lock with hand-off, owning the virtual node it is registered at
-- (say /lock; any path works, and each registration has locks of its own).
--
-- Acquire: create /lock/<l>/w- (any ticket name; the flags are forced to
--   EPHEMERAL_SEQUENTIAL, so the ticket dies with its session). One call:
--   the reply's path is the caller's ticket, and its stat says whether the
--   caller holds the lock now (version 1) or waits (version 0).
-- Grant: a ticket is granted when its version becomes 1. The extension sets
--   the ticket's data (to the data it was created with) once, in the
--   transaction that makes it the holder. A waiter sets a data watch on its
--   own ticket (getData or exists): only the next waiter is notified at
--   each hand-off, in arrival order (no herd), and a grant that happened
--   before the watch was set shows in the read's version (no lost wake-up).
-- Holder: getData /lock/<l> returns the holder's ticket name (the oldest
--   ticket); "" when free. The extension keeps it as the lock's data, so a
--   watch on it fires at every change of holder (for observers).
-- Release: delete /lock/<l>/<ticket> (only the owning session may; NoAuth
--   otherwise). In the same transaction the next ticket is granted: that is
--   the hand-off. Deleting a waiting ticket cancels the wait.
-- A holder whose session closes or expires is released the same way: the
--   server runs the delete of its ticket through this extension first, so
--   the lock passes to the next waiter.
-- setData below /lock/<l> is refused (BadArguments): grants are the
--   extension's.

local ROOT = EXTENSION.path
-- The path as a Lua pattern matching itself (its punctuation escaped).
local ROOT_PATTERN = ROOT:gsub("%p", "%%%0")

-- The oldest ticket's name, or "".
local function head(zk, lock)
  local best
  for _, name in ipairs(zk.children(lock)) do
    -- The sequence suffix orders tickets, whatever their prefixes.
    if best == nil or name:sub(-10) < best:sub(-10) then best = name end
  end
  return best or ""
end

-- Makes the head the recorded holder and grants its ticket (version 0 -> 1).
local function record_holder(zk, lock)
  local holder = head(zk, lock)
  local current = zk.get(lock)
  if current ~= holder then zk.set(lock, holder) end
  if holder ~= "" then
    local ticket = lock .. "/" .. holder
    local data, stat = zk.get(ticket)
    if stat.version == 0 then zk.set(ticket, data, 0) end
  end
  return holder
end

return {
  create = function(req, zk)
    local lock = req.path:match("^(" .. ROOT_PATTERN .. "/[^/]+)/[^/]*$")
    if not lock then zk.fail("BadArguments") end
    if not zk.exists(ROOT) then zk.create(ROOT, "") end
    if not zk.exists(lock) then zk.create(lock, "") end
    local path = zk.create(req.path, req.data, zk.EPHEMERAL_SEQUENTIAL)
    record_holder(zk, lock)
    local _, stat = zk.get(path)
    return { path = path, stat = stat }
  end,

  delete = function(req, zk)
    local lock = req.path:match("^(" .. ROOT_PATTERN .. "/[^/]+)/[^/]+$")
    if not lock then return zk.default(req) end
    local stat = zk.exists(req.path)
    if stat and stat.ephemeral_owner ~= req.session then zk.fail("NoAuth") end
    zk.delete(req.path, req.version)
    record_holder(zk, lock)
  end,

  getData = function(req, zk)
    if not req.path:match("^" .. ROOT_PATTERN .. "/[^/]+$") then return zk.default(req) end
    local holder = record_holder(zk, req.path)
    local _, stat = zk.get(req.path)
    return { data = holder, stat = stat }
  end,

  setData = function(req, zk)
    if req.path:match("^" .. ROOT_PATTERN .. "/") then zk.fail("BadArguments") end
    return zk.default(req)
  end,
}
