-- Priority queue (EZK paper, section 3.2), owning the virtual node /queue.
--
-- Insert: create "/queue/node-<prio>-" with the sequential flag and the
--   element as data. Smaller <prio> (an integer, may be negative) comes out
--   first; equal priorities come out in insertion order (the sequence suffix).
-- Remove: getData "/queue/next" returns the head element's data and removes
--   it, atomically, in one call. NoNode when the queue is empty.
-- Everything else on /queue behaves like a regular node.

local QUEUE = "/queue"
local NEXT = QUEUE .. "/next"

-- "node-<prio>-<10-digit sequence>" -> prio (integer), sequence (string)
local function parse(name)
  local prio, seq = name:match("^node%-(%-?%d+)%-(%d+)$")
  return math.tointeger(tonumber(prio)), seq
end

local function ensure_queue(zk)
  if not zk.exists(QUEUE) then zk.create(QUEUE, "") end
end

return {
  create = function(req, zk)
    if req.path == QUEUE then return zk.default(req) end
    -- Only well-formed, sequential element names may enter the queue.
    local name = req.path:sub(#QUEUE + 2)
    if not req.sequential or not name:match("^node%-%-?%d+%-$") then
      zk.fail("BadArguments")
    end
    ensure_queue(zk)
    return zk.default(req)
  end,

  getData = function(req, zk)
    if req.path ~= NEXT then return zk.default(req) end
    if not zk.exists(QUEUE) then zk.fail("NoNode") end
    local head, head_prio, head_seq
    for _, name in ipairs(zk.children(QUEUE)) do
      local prio, seq = parse(name)
      -- Sequence suffixes are fixed-width, so string order is numeric order.
      if prio and (head == nil or prio < head_prio
                   or (prio == head_prio and seq < head_seq)) then
        head, head_prio, head_seq = name, prio, seq
      end
    end
    if head == nil then zk.fail("NoNode") end
    local path = QUEUE .. "/" .. head
    local data, stat = zk.get(path)
    zk.delete(path, stat.version)
    return { data = data, stat = stat }
  end,
}
