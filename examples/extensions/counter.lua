-- Atomic counters, owning the virtual node they are registered at (say
-- /counter; any path works, and each registration has counters of its
-- own). A counter <name> is the
-- regular node /counter/<name> whose data is its value as a decimal string;
-- it springs into existence at 0 on first use.
--
-- getData /counter/<name>/next: adds 1 and returns the new value (one call,
--   no retries, whatever the contention).
-- setData /counter/<name> <delta>: adds the decimal integer <delta>; the
--   reply's stat is the counter node's. A malformed delta: BadArguments.
-- Everything else (getData /counter/<name>, delete, ...) is regular.

local ROOT = EXTENSION.path
-- The path as a Lua pattern matching itself (its punctuation escaped).
local ROOT_PATTERN = ROOT:gsub("%p", "%%%0")

local function counter_of(path, suffix)
  return path:match("^(" .. ROOT_PATTERN .. "/[^/]+)" .. suffix .. "$")
end

-- A decimal integer (optional sign, surrounding spaces).
local function integer(s)
  if not s:match("^%s*[-+]?%d+%s*$") then return nil end
  return math.tointeger(tonumber(s))
end

local function add(zk, node, delta)
  if not zk.exists(ROOT) then zk.create(ROOT, "") end
  if not zk.exists(node) then zk.create(node, "0") end
  local data, stat = zk.get(node)
  local value = integer(data)
  if value == nil then zk.fail("DataInconsistency") end
  local new = value + delta
  return new, zk.set(node, tostring(new), stat.version)
end

return {
  getData = function(req, zk)
    local node = counter_of(req.path, "/next")
    if not node then return zk.default(req) end
    local value, stat = add(zk, node, 1)
    return { data = tostring(value), stat = stat }
  end,

  setData = function(req, zk)
    local node = counter_of(req.path, "")
    if not node then return zk.default(req) end
    local delta = integer(req.data)
    if delta == nil then zk.fail("BadArguments") end
    local _, stat = add(zk, node, delta)
    return { stat = stat }
  end,
}
