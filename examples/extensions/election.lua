-- Leader election, owning the virtual node it is registered at (say
-- /election; any path works, and each registration has elections of its
-- own).
--
-- Join: create /election/<e>/c- with the candidate's data (say its address;
--   any ticket name; the flags are forced to EPHEMERAL_SEQUENTIAL, so the
--   candidacy dies with its session). One call: the reply's path is the
--   candidate's ticket, and its stat says whether it leads now (version 1)
--   or waits (version 0).
-- Leader: the oldest candidate. getData /election/<e> returns the leader's
--   ticket name ("" when there is none); the extension keeps it as the
--   election node's data, so a watch on it fires at every change of leader.
--   The leader's data is getData /election/<e>/<ticket>.
-- Elected: a candidate's ticket version becomes 1 in the transaction that
--   makes it the leader (the extension sets its data again, unchanged). A
--   candidate watches its own ticket's data: a change of leader notifies
--   only the new leader among the candidates (and whoever watches the
--   election node).
-- Resign: delete /election/<e>/<ticket> (only the owning session may;
--   NoAuth otherwise). If it was the leader, the next candidate in join
--   order leads, in the same transaction. A leader whose session closes or
--   expires resigns the same way: the server runs the delete of its ticket
--   through this extension.
-- setData below /election/<e> is refused (BadArguments).

local ROOT = EXTENSION.path
-- The path as a Lua pattern matching itself (its punctuation escaped).
local ROOT_PATTERN = ROOT:gsub("%p", "%%%0")

local function oldest(zk, election)
  local best
  for _, name in ipairs(zk.children(election)) do
    if best == nil or name:sub(-10) < best:sub(-10) then best = name end
  end
  return best or ""
end

-- Makes the oldest candidate the recorded leader and marks its ticket.
local function elect(zk, election)
  local leader = oldest(zk, election)
  if zk.get(election) ~= leader then zk.set(election, leader) end
  if leader ~= "" then
    local ticket = election .. "/" .. leader
    local data, stat = zk.get(ticket)
    if stat.version == 0 then zk.set(ticket, data, 0) end
  end
  return leader
end

return {
  create = function(req, zk)
    local election = req.path:match("^(" .. ROOT_PATTERN .. "/[^/]+)/[^/]*$")
    if not election then zk.fail("BadArguments") end
    if not zk.exists(ROOT) then zk.create(ROOT, "") end
    if not zk.exists(election) then zk.create(election, "") end
    local path = zk.create(req.path, req.data, zk.EPHEMERAL_SEQUENTIAL)
    elect(zk, election)
    local _, stat = zk.get(path)
    return { path = path, stat = stat }
  end,

  delete = function(req, zk)
    local election = req.path:match("^(" .. ROOT_PATTERN .. "/[^/]+)/[^/]+$")
    if not election then return zk.default(req) end
    local stat = zk.exists(req.path)
    if stat and stat.ephemeral_owner ~= req.session then zk.fail("NoAuth") end
    zk.delete(req.path, req.version)
    elect(zk, election)
  end,

  getData = function(req, zk)
    if not req.path:match("^" .. ROOT_PATTERN .. "/[^/]+$") then return zk.default(req) end
    local leader = elect(zk, req.path)
    local _, stat = zk.get(req.path)
    return { data = leader, stat = stat }
  end,

  setData = function(req, zk)
    if req.path:match("^" .. ROOT_PATTERN .. "/") then zk.fail("BadArguments") end
    return zk.default(req)
  end,
}
