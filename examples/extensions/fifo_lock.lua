-- FIFO lock with hand-off, owning the virtual node it is registered at
-- (say /lock; any path works, and each registration has locks of its own).
--
-- Acquire: create /lock/<l>/w- (flags are forced to EPHEMERAL_SEQUENTIAL, so
--   the waiter node dies with its session). The reply's path is the
--   caller's ticket. If nobody held the lock, the caller holds it now.
-- Holder: getData /lock/<l> returns the holder's ticket name (the oldest
--   waiter), recomputed on every read; "" when free.
-- Release: delete /lock/<l>/<ticket> (only the owning session may; NoAuth
--   otherwise). In the same transaction the lock's data is set to the next
--   ticket: that is the hand-off, and waiters learn it by watching the data
--   of /lock/<l> instead of racing on children.
-- A holder whose session closes or expires is released the same way: the
--   server runs the delete of its ticket through this extension first, so
--   the lock passes to the next waiter.

local ROOT = EXTENSION.path
-- The path as a Lua pattern matching itself (its punctuation escaped).
local ROOT_PATTERN = ROOT:gsub("%p", "%%%0")

local function head(zk, lock)
  local best
  for _, name in ipairs(zk.children(lock)) do
    -- Tickets share the prefix, so the sequence suffix orders them.
    if best == nil or name:sub(-10) < best:sub(-10) then best = name end
  end
  return best or ""
end

local function record_holder(zk, lock)
  local holder = head(zk, lock)
  local current = zk.get(lock)
  if current ~= holder then zk.set(lock, holder) end
  return holder
end

return {
  create = function(req, zk)
    local lock = req.path:match("^(" .. ROOT_PATTERN .. "/[^/]+)/[^/]*$")
    if not lock then zk.fail("BadArguments") end
    if not zk.exists(ROOT) then zk.create(ROOT, "") end
    if not zk.exists(lock) then zk.create(lock, "") end
    local path, stat = zk.create(req.path, "", zk.EPHEMERAL_SEQUENTIAL)
    record_holder(zk, lock)
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
}
