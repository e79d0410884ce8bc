-- Counting semaphore with FIFO hand-off, owning the virtual node it is
-- registered at (say /sem; any path works, and each registration has
-- semaphores of its own).
--
-- Create: create /sem/<s> with data N (a positive decimal integer): a
--   semaphore of N permits. A missing or non-positive N is BadArguments.
--   setData /sem/<s> N changes the number of permits (more permits grant
--   waiters at once; fewer take none back, they only stop new grants until
--   enough are released).
-- Acquire: create /sem/<s>/p- (any ticket name; the flags are forced to
--   EPHEMERAL_SEQUENTIAL, so the ticket dies with its session; NoNode if
--   the semaphore was not created). One call: the reply's path is the
--   caller's ticket, and its stat says whether the caller holds a permit
--   now (version 1) or waits (version 0).
-- Grant: a ticket is granted when its version becomes 1 (the extension
--   sets its data, to what it was created with, once). Waiters are granted
--   in arrival order as permits free up; a waiter watches its own ticket's
--   data, so each release notifies exactly the waiter it grants.
-- Holders: getData /sem/<s> returns N, as stored. getChildren /sem/<s>
--   lists the tickets (granted ones have version 1).
-- Release: delete /sem/<s>/<ticket> (only the owning session may; NoAuth
--   otherwise); the freed permit goes to the oldest waiter in the same
--   transaction. A holder whose session closes or expires releases the same
--   way: the server runs the delete of its ticket through this extension.
-- setData below /sem/<s> is refused (BadArguments): grants are the
--   extension's.

local ROOT = EXTENSION.path
-- The path as a Lua pattern matching itself (its punctuation escaped).
local ROOT_PATTERN = ROOT:gsub("%p", "%%%0")

local function permits_of(data)
  local n = math.tointeger(tonumber(data))
  if n == nil or n < 1 then return nil end
  return n
end

-- Grants the oldest waiting tickets while fewer than N hold a permit.
local function grant(zk, sem)
  local n = permits_of((zk.get(sem))) or 0
  local tickets = zk.children(sem)
  table.sort(tickets, function(a, b) return a:sub(-10) < b:sub(-10) end)
  local held, waiting = 0, {}
  for _, name in ipairs(tickets) do
    local path = sem .. "/" .. name
    local data, stat = zk.get(path)
    if stat.version > 0 then
      held = held + 1
    else
      waiting[#waiting + 1] = { path = path, data = data }
    end
  end
  for _, t in ipairs(waiting) do
    if held >= n then break end
    zk.set(t.path, t.data, 0)
    held = held + 1
  end
end

return {
  create = function(req, zk)
    local name = req.path:match("^" .. ROOT_PATTERN .. "/([^/]+)$")
    if name then
      if permits_of(req.data) == nil then zk.fail("BadArguments") end
      if not zk.exists(ROOT) then zk.create(ROOT, "") end
      return zk.default(req)
    end
    local sem = req.path:match("^(" .. ROOT_PATTERN .. "/[^/]+)/[^/]*$")
    if not sem then zk.fail("BadArguments") end
    if not zk.exists(sem) then zk.fail("NoNode") end
    local path = zk.create(req.path, req.data, zk.EPHEMERAL_SEQUENTIAL)
    grant(zk, sem)
    local _, stat = zk.get(path)
    return { path = path, stat = stat }
  end,

  delete = function(req, zk)
    local sem = req.path:match("^(" .. ROOT_PATTERN .. "/[^/]+)/[^/]+$")
    if not sem then return zk.default(req) end
    local stat = zk.exists(req.path)
    if stat and stat.ephemeral_owner ~= req.session then zk.fail("NoAuth") end
    zk.delete(req.path, req.version)
    grant(zk, sem)
  end,

  setData = function(req, zk)
    if req.path:match("^" .. ROOT_PATTERN .. "/[^/]+/") then zk.fail("BadArguments") end
    if not req.path:match("^" .. ROOT_PATTERN .. "/[^/]+$") then return zk.default(req) end
    if permits_of(req.data) == nil then zk.fail("BadArguments") end
    zk.default(req)
    grant(zk, req.path)
    local _, stat = zk.get(req.path)
    return { stat = stat }
  end,
}
