-- Read-write lock with FIFO fairness and hand-off, owning the virtual node
-- it is registered at (say /rwlock; any path works, and each registration
-- has locks of its own).
--
-- Acquire: create /rwlock/<l>/read- for a read lock or /rwlock/<l>/write-
--   for a write lock (a name that starts with "read-" or "write-"; anything
--   else is BadArguments; the flags are forced to EPHEMERAL_SEQUENTIAL, so
--   the ticket dies with its session). One call: the reply's path is the
--   caller's ticket, and its stat says whether the caller holds the lock
--   now (version 1) or waits (version 0).
-- Fairness: tickets are served in arrival order. A write ticket is granted
--   when it is the oldest ticket; a read ticket when no write ticket is
--   older. Readers share the lock; a waiting writer holds back the readers
--   that came after it, so writers do not starve.
-- Grant: a ticket's version becomes 1 in the transaction that grants it
--   (the extension sets its data, unchanged, once). A waiter watches its own
--   ticket's data: each release notifies exactly the tickets it grants.
-- Holders: getData /rwlock/<l> returns the granted tickets' names, in order,
--   separated by spaces ("" when free); the extension keeps it as the lock's
--   data, so a watch on it fires at every change of holders.
-- Release: delete /rwlock/<l>/<ticket> (only the owning session may; NoAuth
--   otherwise); what the release makes grantable is granted in the same
--   transaction. A holder whose session closes or expires releases the same
--   way: the server runs the delete of its ticket through this extension.
-- setData below /rwlock/<l> is refused (BadArguments).

local ROOT = EXTENSION.path
-- The path as a Lua pattern matching itself (its punctuation escaped).
local ROOT_PATTERN = ROOT:gsub("%p", "%%%0")

local function is_write(name) return name:sub(1, 6) == "write-" end
local function is_read(name) return name:sub(1, 5) == "read-" end

-- Grants what the FIFO rule allows and records the holders.
local function grant(zk, lock)
  local tickets = zk.children(lock)
  table.sort(tickets, function(a, b) return a:sub(-10) < b:sub(-10) end)
  local holders = {}
  for i, name in ipairs(tickets) do
    if is_write(name) then
      if i == 1 then holders[1] = name end
      break
    end
    holders[#holders + 1] = name
  end
  for _, name in ipairs(holders) do
    local ticket = lock .. "/" .. name
    local data, stat = zk.get(ticket)
    if stat.version == 0 then zk.set(ticket, data, 0) end
  end
  local recorded = table.concat(holders, " ")
  if zk.get(lock) ~= recorded then zk.set(lock, recorded) end
  return recorded
end

return {
  create = function(req, zk)
    local lock, name = req.path:match("^(" .. ROOT_PATTERN .. "/[^/]+)/([^/]*)$")
    if not lock or not (is_read(name) or is_write(name)) then zk.fail("BadArguments") end
    if not zk.exists(ROOT) then zk.create(ROOT, "") end
    if not zk.exists(lock) then zk.create(lock, "") end
    local path = zk.create(req.path, req.data, zk.EPHEMERAL_SEQUENTIAL)
    grant(zk, lock)
    local _, stat = zk.get(path)
    return { path = path, stat = stat }
  end,

  delete = function(req, zk)
    local lock = req.path:match("^(" .. ROOT_PATTERN .. "/[^/]+)/[^/]+$")
    if not lock then return zk.default(req) end
    local stat = zk.exists(req.path)
    if stat and stat.ephemeral_owner ~= req.session then zk.fail("NoAuth") end
    zk.delete(req.path, req.version)
    grant(zk, lock)
  end,

  getData = function(req, zk)
    if not req.path:match("^" .. ROOT_PATTERN .. "/[^/]+$") then return zk.default(req) end
    local holders = grant(zk, req.path)
    local _, stat = zk.get(req.path)
    return { data = holders, stat = stat }
  end,

  setData = function(req, zk)
    if req.path:match("^" .. ROOT_PATTERN .. "/") then zk.fail("BadArguments") end
    return zk.default(req)
  end,
}
