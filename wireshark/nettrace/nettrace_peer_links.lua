-- nettrace_peer_links.lua - nettrace dissector: cross-host links between
-- a sender's SND_SW frame and the receiver's STACK_ENTRY frame of the same
-- TCP bytes, with the one-way latency, causality violations and ambiguous
-- sends.
--
-- One rule with nettrace-match (tracer-match/src/matcher.rs; stated in
-- docs/reading-a-trace.md, "Across hosts", and docs/matching.md): pairs are
-- made by bytes, not by tags.
--   * A send is an SND_SW frame; SND_HW frames count only for a sender skb
--     (agent, cookie, tskey) with no SND_SW at all (an SND_HW callback runs
--     at TX completion, after the packet left). It carries the bytes
--     [seq, end_seq) its skb held at that callback (tx_flags RANGE), else
--     (a version-1 event) the tskey byte alone, and follows its LAST byte
--     b = end_seq - 1.
--   * A reception is an RX STACK_ENTRY frame of a TCP skb with data,
--     [seq, end_seq), on the same flow. Both hosts write the flow as the
--     data travelled (TX: local -> remote; RX: sender -> receiver), so the
--     key is the same 4-tuple on both sides (an IPv4-mapped IPv6 pair
--     counts as IPv4: a dual-stack sender socket, an IPv4 packet on the
--     wire).
--   * For a send T following b: SENDS = the sends of the flow whose range
--     holds b, RECV = the receptions of the flow holding b, both within
--     +-W of T's global time and ordered by (global_ns, frame). With as
--     many of each, T pairs with RECV[k], k its rank in SENDS: a path does
--     not reorder the copies of one byte, so no clock is needed. With
--     receptions but not as many, T is ambiguous, "unrecorded_send" (more
--     receptions: a copy went out untagged) or "lost_copy" (fewer: one was
--     lost before the stack), and no link is made. With none, T was not
--     received. W is the preference peer_window_ms (nettrace-match
--     --window, default 250 ms).
--   * A send links to its reception; a reception lists every send paired
--     with it (a GRO skb carries several).
-- oneway_ns = reception global_ns - send global_ns, signed; a negative one
-- is a causality violation, which under this rule means the clocks
-- disagree (never a wrong choice among copies).
--
-- The first pass (pinfo.visited false, frame order) only fills the index;
-- every dissection reads the links from it, so a re-dissection (tshark -2,
-- a click in the GUI after loading) sees links to later frames, and a
-- single pass shows what the frames so far give (a link only on the later
-- of its two frames). Per flow, sends are kept by last byte (a sorted
-- array of distinct bytes, each with its sends) and receptions by first
-- byte: gathering the copies of a byte is a binary search plus the items
-- within the flow's longest range, done once per byte and state of the
-- index and shared by the byte's sends; a send's pairing is then binary
-- searches by time. Both are cached until the index grows (on a second
-- pass: computed once).
--
-- nettrace.lua loads this file and calls the function it returns with the
-- parts loaded before it; loaded on its own (as Wireshark loads every .lua
-- file of a plugin folder) it only returns that function.

return function(p)
    local proto = p.proto
    local LAYOUT = p.layout
    local F, E = p.fields.F, p.fields.E
    local c = p.common
    local STAGE, signed_diff, format_ns = c.STAGE, c.signed_diff, c.format_ns
    local SEQ_SPACE, seq_unwrap = c.SEQ_SPACE, c.seq_unwrap

    -- Sequence numbers of one flow, on both hosts, are unwrapped into one
    -- number line (doubles hold them exactly) starting here.
    local PEER_SEQ_BASE = 2 ^ 40
    -- A range longer than this is not indexed as one (a reception is skipped,
    -- a send counts as its tskey byte): nettrace-match's MAX_SKB_SPAN, far
    -- above any GRO/BIG TCP skb, and one bogus range would make every scan of
    -- its flow long.
    local PEER_MAX_SPAN = 4 * 1024 * 1024
    -- Sends listed on one RX frame (all are counted in peer_count), and
    -- ambiguous sends shown there.
    local PEER_MAX_SHOWN = 64
    -- The bounds that keep a crafted or pathological trace linear (every
    -- frame costs at most a constant): index entries looked at to gather the
    -- copies of one byte (sends ending within the flow's longest send after
    -- it, receptions starting within its longest reception before it); a byte
    -- with more is ambiguous, "too_many_copies", for good (the index only
    -- grows). nettrace-match applies the same bound (MAX_COPY_SCAN). No real
    -- trace comes near it: a 64 KB GRO skb over 1448-byte sends looks at ~90.
    local PEER_MAX_EXAMINED = 512
    -- Sends (or crowded bytes) an RX frame examines for its list: those past
    -- it are counted (nettrace.peer_unexamined) and their own frames show
    -- their links.
    local PEER_RX_MAX_SENDS = 256
    -- Index entries one frame may look at in all its gatherings (on the first
    -- pass every new item makes the copies of the bytes it holds stale); past
    -- it, the rest of an RX frame's list is left unexamined as above. A
    -- frame's own send always fits (at most 2 x PEER_MAX_EXAMINED).
    local PEER_FRAME_BUDGET = 4096
    local peer_budget = PEER_FRAME_BUDGET
    local V4_MAPPED = string.rep("\0", 10) .. "\255\255"

    -- flow key -> { tx_keys, tx, tx_maxlen, rx, rx_maxlen, ref_s, ref_x }
    local peer_flows = {}
    local peer_memo = {} -- frame -> index -> { flow, tx = send or rx = reception }
    local peer_skbs = {} -- "agent:cookie:tskey" -> { nsw = SND_SW frames }
    -- Times are kept as exact doubles: ns since the first indexed event.
    local peer_base = nil
    -- Items indexed so far: the order of each item, and the version of the
    -- index that cached pairings belong to.
    local peer_gen = 0

    local function reset_peer_state()
        peer_flows, peer_memo, peer_skbs, peer_base, peer_gen = {}, {}, {}, nil, 0
    end

    -- Inserts `v` into `list`, kept sorted by less(a, b), after its equals.
    -- In-order items (the common case) are appended; a late one costs the
    -- number of items it moves past.
    local function sorted_insert(list, v, less)
        local i = #list + 1
        while i > 1 and less(v, list[i - 1]) do
            list[i] = list[i - 1]
            i = i - 1
        end
        list[i] = v
    end

    -- First index of sorted `list` whose key(item) >= x (or > x when
    -- `strict`); #list + 1 when there is none.
    local function bound(list, x, key, strict)
        local lo, hi = 1, #list + 1
        while lo < hi do
            local mid = math.floor((lo + hi) / 2)
            local k = key(list[mid])
            if k < x or (strict and k == x) then
                lo = mid + 1
            else
                hi = mid
            end
        end
        return lo
    end

    -- A sorted sequence kept in blocks, each a sorted array of at most
    -- 2 x SL_BLOCK items, every item of a block sorting before the next
    -- block's: an insert anywhere costs a binary search and at most 2 x
    -- SL_BLOCK moves (plus, once per SL_BLOCK inserts into one block, moving
    -- the list of blocks), so items arriving in any order (a crafted trace)
    -- cost about what in-order ones do. A position is (block, index).
    local SL_BLOCK = 64

    local function sl_new()
        return { {} }
    end

    local function sl_insert(q, v, less)
        -- The last block whose first item is not after v (only block 1 can
        -- be empty, and only while the sequence is).
        local lo, hi = 1, #q
        while lo < hi do
            local mid = math.floor((lo + hi + 1) / 2)
            if less(v, q[mid][1]) then
                hi = mid - 1
            else
                lo = mid
            end
        end
        local blk = q[lo]
        sorted_insert(blk, v, less)
        if #blk > 2 * SL_BLOCK then
            local rest, n = {}, #blk
            for i = SL_BLOCK + 1, n do
                rest[#rest + 1], blk[i] = blk[i], nil
            end
            table.insert(q, lo + 1, rest)
        end
    end

    -- The first position whose key(item) >= x (> x when `strict`); past the
    -- end when there is none.
    local function sl_seek(q, x, key, strict)
        local lo, hi = 1, #q + 1
        while lo < hi do
            local mid = math.floor((lo + hi) / 2)
            local b = q[mid]
            local last = b[#b]
            local k = last ~= nil and key(last) or nil
            if k == nil or k < x or (strict and k == x) then
                lo = mid + 1
            else
                hi = mid
            end
        end
        if lo > #q then
            return #q + 1, 1
        end
        return lo, bound(q[lo], x, key, strict)
    end

    -- The item at a position, nil past either end.
    local function sl_at(q, k, i)
        local b = q[k]
        return b and b[i]
    end

    local function sl_next(q, k, i)
        if i < #q[k] then
            return k, i + 1
        end
        return k + 1, 1
    end

    local function sl_prev(q, k, i)
        if i > 1 then
            return k, i - 1
        end
        if k <= 1 then
            return 0, 0
        end
        return k - 1, #q[k - 1]
    end

    -- The connection key of an event whose reader `b` has family, saddr,
    -- daddr, sport and dport in the data's direction; nil without a family.
    local function peer_flow_key(b)
        local family = b("family"):uint()
        local s, d = b("saddr"):raw(), b("daddr"):raw()
        if family == 4 then
            s, d = s:sub(1, 4), d:sub(1, 4)
        elseif family == 6 then
            if s:sub(1, 12) == V4_MAPPED and d:sub(1, 12) == V4_MAPPED then
                s, d = s:sub(13, 16), d:sub(13, 16)
            end
        else
            return nil
        end
        return s .. d .. b("sport"):le_uint() .. ":" .. b("dport"):le_uint()
    end

    local function peer_flow(key)
        local f = peer_flows[key]
        if f == nil then
            f = { tx_keys = sl_new(), tx = {}, tx_maxlen = 1, rx = sl_new(), rx_maxlen = 0 }
            peer_flows[key] = f
        end
        return f
    end

    -- Sequence number `s` of flow `f` on the flow's number line.
    local function peer_unwrap(f, s)
        return seq_unwrap(f, s, PEER_SEQ_BASE)
    end

    -- Global time `ns` (UInt64) as an exact double: ns since the first event
    -- indexed (exact while a trace spans less than 2^53 ns, 104 days).
    local function peer_time(ns)
        if peer_base == nil then
            peer_base = ns
        end
        return signed_diff(ns, peer_base):tonumber()
    end

    -- The next item's order (and a new version of the index).
    local function peer_next()
        peer_gen = peer_gen + 1
        return peer_gen
    end

    local function number_key(v) return v end
    local function start_key(r) return r.s end
    local function time_key(v) return v.t end
    local function by_number(a, b) return a < b end
    local function by_start(a, b) return a.s < b.s end
    -- The order of copies of one byte: global time, then index order.
    local function by_time(a, b) return a.t < b.t or (a.t == b.t and a.order < b.order) end

    -- The peer window in ns (the preference).
    local function peer_window_ns()
        return proto.prefs.peer_window_ms * 1e6
    end

    -- The sender skb an event belongs to (agent, cookie, tskey).
    local function peer_skb(agent, cookie, tskey)
        local key = string.format("%s:%s:%d", tostring(agent), tostring(cookie), tskey)
        local skb = peer_skbs[key]
        if skb == nil then
            skb = { nsw = 0 }
            peer_skbs[key] = skb
        end
        return skb
    end

    -- Records a send of sender skb `skb` holding the unwrapped bytes
    -- [s, s + len).
    local function peer_add_tx(f, skb, sw, s, len, tskey, ns, frame)
        local b = s + len - 1
        local send = { s = s, b = b, tskey = tskey, skb = skb, sw = sw, ns = ns, t = peer_time(ns),
            frame = frame, order = peer_next() }
        if sw then
            skb.nsw = skb.nsw + 1
        end
        local at = f.tx[b]
        if at == nil then
            at = {}
            f.tx[b] = at
            sl_insert(f.tx_keys, b, by_number)
        end
        at[#at + 1] = send
        if len > f.tx_maxlen then
            f.tx_maxlen = len
        end
        return send
    end

    -- Records a reception (STACK_ENTRY of a data skb) seq..end_seq.
    local function peer_add_rx(f, seq, end_seq, ns, frame)
        local len = (end_seq - seq) % SEQ_SPACE
        if len == 0 or len > PEER_MAX_SPAN then
            return nil
        end
        local s = peer_unwrap(f, seq)
        local r = { s = s, e = s + len, ns = ns, t = peer_time(ns), frame = frame, order = peer_next() }
        sl_insert(f.rx, r, by_start)
        if len > f.rx_maxlen then
            f.rx_maxlen = len
        end
        return r
    end

    -- Whether a send counts: an SND_SW, or an SND_HW of an skb without one.
    local function peer_counts(send)
        return send.sw or send.skb.nsw == 0
    end

    -- The sends of flow `f` that count and hold byte x, by time; nil when
    -- gathering them would look at more than PEER_MAX_EXAMINED entries.
    local function peer_sends_holding(f, x)
        local out, keys, examined = {}, f.tx_keys, 0
        local k, i = sl_seek(keys, x, number_key)
        -- A send holding x ends at most its length past it.
        while true do
            local b = sl_at(keys, k, i)
            if b == nil or b >= x + f.tx_maxlen then
                break
            end
            local at = f.tx[b]
            examined = examined + #at
            peer_budget = peer_budget - #at
            if examined > PEER_MAX_EXAMINED then
                return nil
            end
            for _, s in ipairs(at) do
                if s.s <= x and peer_counts(s) then
                    out[#out + 1] = s
                end
            end
            k, i = sl_next(keys, k, i)
        end
        table.sort(out, by_time)
        return out
    end

    -- The receptions of flow `f` holding byte x, by time; nil past
    -- PEER_MAX_EXAMINED entries, as above.
    local function peer_receptions_holding(f, x)
        local out, rx, examined = {}, f.rx, 0
        -- From the last one starting at or before x, back.
        local k, j = sl_prev(rx, sl_seek(rx, x, start_key, true))
        while true do
            local r = sl_at(rx, k, j)
            if r == nil or r.s + f.rx_maxlen <= x then
                break
            end
            examined = examined + 1
            peer_budget = peer_budget - 1
            if examined > PEER_MAX_EXAMINED then
                return nil
            end
            if r.e > x then
                out[#out + 1] = r
            end
            k, j = sl_prev(rx, k, j)
        end
        table.sort(out, by_time)
        return out
    end

    -- The copies of byte x, the last byte of the sends in `bucket` (f.tx[x]):
    -- { sends, recvs }, each by time, or { overflow = true } past the bound;
    -- nil when this frame's budget is spent. Cached on the bucket until the
    -- index grows (an overflow for good), so the sends of one byte share one
    -- scan.
    local function peer_copies(f, x, bucket)
        local c = bucket.copies
        if c == nil or (c.gen ~= peer_gen and not c.overflow) then
            if peer_budget <= 0 then
                return nil
            end
            local sends = peer_sends_holding(f, x)
            local recvs = sends and peer_receptions_holding(f, x)
            if recvs == nil then
                c = { overflow = true }
            else
                c = { gen = peer_gen, sends = sends, recvs = recvs }
            end
            bucket.copies = c
        end
        return c
    end

    -- Index of `item` in `list`, which holds it and is sorted by_time.
    local function peer_rank(list, item)
        local lo, hi = 1, #list
        while lo < hi do
            local mid = math.floor((lo + hi) / 2)
            if by_time(list[mid], item) then
                lo = mid + 1
            else
                hi = mid
            end
        end
        return lo
    end

    -- The pairing of `send` (of flow `f`): false when it does not count or
    -- nothing received its last byte within the window, else { nsends, nrecv,
    -- rx = its reception, or why = "unrecorded_send" / "lost_copy" }, or
    -- { why = "too_many_copies" } past the gathering bound; nil when this
    -- frame's budget is spent.
    local function peer_pair(f, send)
        local w = peer_window_ns()
        if send.gen == peer_gen and send.w == w then
            return send.pair
        end
        local pair = false
        if peer_counts(send) then
            local c = peer_copies(f, send.b, f.tx[send.b])
            if c == nil then
                return nil
            elseif c.overflow then
                send.gen, send.w, send.pair = peer_gen, w, { why = "too_many_copies" }
                return send.pair
            end
            local lo, hi = send.t - w, send.t + w
            -- Those within [lo, hi]: a slice of each list.
            local r1 = bound(c.recvs, lo, time_key)
            local nrecv = bound(c.recvs, hi, time_key, true) - r1
            if nrecv > 0 then
                local s1 = bound(c.sends, lo, time_key)
                local nsends = bound(c.sends, hi, time_key, true) - s1
                pair = { nsends = nsends, nrecv = nrecv }
                if nsends == nrecv then
                    -- The send's own place among them (it is one of them).
                    local k = peer_rank(c.sends, send)
                    pair.rx = c.recvs[r1 + (k - s1)]
                elseif nrecv > nsends then
                    pair.why = "unrecorded_send"
                else
                    pair.why = "lost_copy"
                end
            end
        end
        send.gen, send.w, send.pair = peer_gen, w, pair
        return pair
    end

    -- The sends paired with reception `r`, and the ambiguous sends whose last
    -- byte it holds (within the window), each in sequence order:
    -- { send, pair }; and how many distinct last bytes of sends it holds were
    -- left unexamined (past PEER_RX_MAX_SENDS sends).
    local function peer_of_rx(f, r)
        local linked, ambiguous = {}, {}
        local keys, w = f.tx_keys, peer_window_ns()
        -- From the first last byte of a send that r holds.
        local k, i = sl_seek(keys, r.s, number_key)
        local examined = 0
        while true do
            local b = sl_at(keys, k, i)
            if b == nil or b >= r.e then
                return linked, ambiguous, 0
            end
            local at = f.tx[b]
            local c = peer_copies(f, b, at)
            if c ~= nil and c.overflow then
                -- A crowded byte is one entry, whatever its number of sends.
                if examined + 1 > PEER_RX_MAX_SENDS then
                    break
                end
                examined = examined + 1
                ambiguous[#ambiguous + 1] = { send = at[1], pair = { why = "too_many_copies" } }
            else
                if c == nil or examined + #at > PEER_RX_MAX_SENDS then
                    break
                end
                examined = examined + #at
                for _, s in ipairs(at) do
                    if math.abs(s.t - r.t) <= w then
                        local p = peer_pair(f, s)
                        if p and p.rx == r then
                            linked[#linked + 1] = { send = s, pair = p }
                        elseif p and p.why then
                            ambiguous[#ambiguous + 1] = { send = s, pair = p }
                        end
                    end
                end
            end
            k, i = sl_next(keys, k, i)
        end
        -- Left unexamined: the last bytes from here, counted up to a bound.
        local left = 0
        while left < PEER_RX_MAX_SENDS do
            local b = sl_at(keys, k, i)
            if b == nil or b >= r.e then
                break
            end
            left = left + 1
            k, i = sl_next(keys, k, i)
        end
        return linked, ambiguous, left
    end

    -- The index entry of event `index` of this frame: made on the first pass
    -- by `make()`, looked up afterwards; nil when the event takes no part.
    local function peer_entry(pinfo, index, make)
        local per_frame = peer_memo[pinfo.number]
        if not pinfo.visited then
            if per_frame == nil then
                per_frame = {}
                peer_memo[pinfo.number] = per_frame
            end
            per_frame[index] = make() or false
        end
        return per_frame and per_frame[index] or nil
    end

    -- Violation fields of one link item: the flag and the expert warning.
    local function add_violation(item, range, oneway, what)
        item:add(F.causality_violation, range, true):set_generated()
        item:add_proto_expert_info(E.causality, string.format(
            "Causality violation: %s %s before it was sent (the hosts' clocks disagree by at least that much)",
            what, format_ns(-oneway):sub(2)))
    end

    -- How many sends and receptions of a byte, for an expert message.
    local function peer_copies_text(p)
        if p.why == "too_many_copies" then
            return string.format("more than %d recorded sends and receptions overlap its last byte",
                PEER_MAX_EXAMINED)
        end
        return string.format("%d recorded send%s and %d reception%s of its last byte within ±%d ms",
            p.nsends, p.nsends == 1 and "" or "s", p.nrecv, p.nrecv == 1 and "" or "s",
            proto.prefs.peer_window_ms)
    end

    -- The unwrapped bytes a send of this TX event stands for: its range at
    -- the callback (version 2, RANGE), else its tskey byte. Returns start, length.
    local function peer_tx_range(f, b, flags, tskey)
        if bit32.band(flags, LAYOUT.tx_flag_range) ~= 0 then
            local seq = b("seq"):le_uint()
            local len = (b("end_seq"):le_uint() - seq) % SEQ_SPACE
            if len > 0 and len <= PEER_MAX_SPAN then
                return peer_unwrap(f, seq), len
            end
        end
        return peer_unwrap(f, tskey), 1
    end

    -- Peer links of a TX frame (a send); returns the Info suffix or "".
    -- `ctx` = { agent, index }; `flags` = tx_flags (0 for version 1).
    local function peer_show_tx(tree, range, pinfo, ctx, b, stage, ns, flags)
        if not proto.prefs.peer_links or (stage ~= STAGE.SND_SW and stage ~= STAGE.SND_HW) then
            return ""
        end
        peer_budget = PEER_FRAME_BUDGET
        local entry = peer_entry(pinfo, ctx.index, function()
            local key = peer_flow_key(b)
            if key == nil then
                return nil
            end
            local f = peer_flow(key)
            local tskey = b("tskey"):le_uint()
            local s, len = peer_tx_range(f, b, flags, tskey)
            local skb = peer_skb(ctx.agent, b("cookie"):le_uint64(), tskey)
            return { flow = f, tx = peer_add_tx(f, skb, stage == STAGE.SND_SW, s, len, tskey, ns, pinfo.number) }
        end)
        if entry == nil then
            return ""
        end
        local p = peer_pair(entry.flow, entry.tx)
        if not p then
            return ""
        end
        if p.why ~= nil then
            local item = tree:add(F.peer_ambiguous, range, p.why)
            item:set_generated()
            item:add_proto_expert_info(E.peer_ambiguous, string.format(
                "Ambiguous send (%s): %s, so which is whose cannot be told: not linked", p.why, peer_copies_text(p)))
            if p.nsends ~= nil then
                tree:add(F.peer_sends, range, p.nsends):set_generated()
                tree:add(F.peer_receptions, range, p.nrecv):set_generated()
            end
            return " [ambiguous: " .. p.why .. "]"
        end
        local r = p.rx
        local oneway = signed_diff(r.ns, ns)
        local item = tree:add(F.peer_frame, range, r.frame)
        item:set_generated()
        item:append_text(" (received there; one-way " .. format_ns(oneway) .. ")")
        tree:add(F.oneway_ns, range, oneway):set_generated()
        if p.nsends > 1 then
            local resent = tree:add(F.peer_sends, range, p.nsends)
            resent:set_generated()
            resent:add_proto_expert_info(E.peer_resent)
            tree:add(F.peer_receptions, range, p.nrecv):set_generated()
        end
        local suffix = string.format(" ⇒ frame %d (one-way %s)", r.frame, format_ns(oneway))
        if r.ns < ns then
            add_violation(item, range, oneway, "received")
            suffix = suffix .. " [causality violation]"
        end
        return suffix
    end

    -- Ambiguous sends whose last byte reception frame holds: a field each
    -- (the first PEER_MAX_SHOWN) and the Info suffix.
    local function peer_show_ambiguous(tree, range, ambiguous)
        local reasons, seen_reason, shown, crowded = {}, {}, 0, nil
        for _, a in ipairs(ambiguous) do
            local why = a.pair.why
            -- Crowded bytes (a crafted trace) are one item, with their count.
            if why == "too_many_copies" and crowded ~= nil then
                crowded.n = crowded.n + 1
            elseif shown < PEER_MAX_SHOWN then
                shown = shown + 1
                local item = tree:add(F.peer_ambiguous, range, why)
                item:set_generated()
                item:append_text(string.format(" (send in frame %d, tskey %d)", a.send.frame, a.send.tskey))
                item:add_proto_expert_info(E.peer_ambiguous, string.format(
                    "Holds the last byte of an ambiguous send (frame %d, %s): %s: not linked",
                    a.send.frame, why, peer_copies_text(a.pair)))
                if why == "too_many_copies" then
                    crowded = { item = item, n = 0 }
                end
            end
            if not seen_reason[why] then
                seen_reason[why] = true
                reasons[#reasons + 1] = why
            end
        end
        if crowded ~= nil and crowded.n > 0 then
            crowded.item:append_text(string.format(" and the last bytes of %d more sends as crowded", crowded.n))
        end
        return " [ambiguous: " .. table.concat(reasons, ",") .. "]"
    end

    -- Peer links of an RX STACK_ENTRY frame of a TCP skb; returns the Info
    -- suffix or "".
    local function peer_show_rx(tree, range, pinfo, index, b, seq, end_seq, ns)
        if not proto.prefs.peer_links then
            return ""
        end
        peer_budget = PEER_FRAME_BUDGET
        local entry = peer_entry(pinfo, index, function()
            local key = peer_flow_key(b)
            if key == nil then
                return nil
            end
            local f = peer_flow(key)
            local r = peer_add_rx(f, seq, end_seq, ns, pinfo.number)
            return r and { flow = f, rx = r } or nil
        end)
        if entry == nil then
            return ""
        end
        local peers, ambiguous, unexamined = peer_of_rx(entry.flow, entry.rx)
        local suffix = ""
        if #peers > 0 then
            local sub = tree:add(F.peer_count, range, #peers)
            sub:set_generated()
            local lo, hi, late = nil, nil, 0
            for i, p in ipairs(peers) do
                local send = p.send
                local oneway = signed_diff(ns, send.ns)
                if i <= PEER_MAX_SHOWN then
                    local item = sub:add(F.peer_frame, range, send.frame)
                    item:set_generated()
                    item:append_text(string.format(" (sent there: tskey %d; one-way %s)", send.tskey,
                        format_ns(oneway)))
                    item:add(F.peer_tskey, range, send.tskey):set_generated()
                    item:add(F.oneway_ns, range, oneway):set_generated()
                    if p.pair.nsends > 1 then
                        local resent = item:add(F.peer_sends, range, p.pair.nsends)
                        resent:set_generated()
                        resent:add_proto_expert_info(E.peer_resent)
                    end
                    if ns < send.ns then
                        add_violation(item, range, oneway, "received")
                    end
                end
                if ns < send.ns then
                    late = late + 1
                end
                lo = (lo == nil or oneway < lo) and oneway or lo
                hi = (hi == nil or oneway > hi) and oneway or hi
            end
            if #peers > PEER_MAX_SHOWN then
                sub:append_text(string.format(" (first %d listed)", PEER_MAX_SHOWN))
            end
            if #peers == 1 then
                suffix = string.format(" ⇐ frame %d (one-way %s)", peers[1].send.frame, format_ns(lo))
            else
                suffix = string.format(" ⇐ frames %d..%d (%d skbs, one-way %s..%s)", peers[1].send.frame,
                    peers[#peers].send.frame, #peers, format_ns(lo), format_ns(hi))
            end
            if late > 0 then
                suffix = suffix .. " [causality violation]"
            end
        end
        if #ambiguous > 0 then
            suffix = suffix .. peer_show_ambiguous(tree, range, ambiguous)
        end
        if unexamined > 0 then
            local item = tree:add(F.peer_unexamined, range, unexamined)
            item:set_generated()
            item:add_proto_expert_info(E.peer_unexamined, string.format(
                "Sends ending at %s%d more of its bytes are not examined here (at most %d sends per frame): their own frames show their links",
                unexamined >= PEER_RX_MAX_SENDS and "at least " or "", unexamined, PEER_RX_MAX_SENDS))
            suffix = suffix .. string.format(" [%d more not examined]", unexamined)
        end
        return suffix
    end

    return { reset_peer_state = reset_peer_state, peer_show_tx = peer_show_tx, peer_show_rx = peer_show_rx }
end
