#!/usr/bin/env python3
"""Which transmission does a SENDMSG tag describe? A packet capture as witness.

Reads the runs bench/tag-witness.sh made (one directory each: the sink's
trace-*.pcapng(.zst), capture-<host>.pcapng of each veth end, run.json) and, per
run and as medians per condition (loss / no loss):

* classifies every SENDMSG tag (host, socket cookie, tskey) against the
  sender-side capture, which stamps each segment as it crosses the
  sender's veth (dev_queue_xmit_nit, just before the driver's SND_SW):
    A   already sent: a segment holding byte tskey crossed the veth before
        the SENDMSG (tcp_tx_timestamp() fell back to the last skb of the
        retransmission queue: the tag lands on an skb already sent, whose
        callbacks fire only if it is sent again);
    C   never sent under this tag: no SND_SW although byte tskey went out
        (a later sendmsg appended to the same skb and re-tagged it, so the
        tag was superseded);
    B   sent, but late: the tag got an SND_SW, yet a segment holding byte
        tskey crossed the veth before the tag's first SCHED, i.e. the byte
        went out in an earlier transmission the tag's callbacks did not
        follow (bytes moved between skbs, or the tagged skb is a later
        copy of them);
    OK  the first transmission carrying byte tskey is the tag's own
        (first capture of the byte between the tag's first SCHED and
        SND_SW, give or take the capture's own delay);
  plus "unsent" (no SND_SW and byte tskey never crossed the veth: data
  still queued when the flow ended) and "other" (SCHED without SND_SW, or
  a flow missing from the capture).
* counts nettrace-match's causality violations (--json) per direction,
  replays its matching rule on the same events to list the violating
  transmissions, and shows the capture evidence of the worst: the tag's
  SENDMSG/SCHED/SND_SW, the RX skb the match chose, and the segments
  holding byte tskey on the sender's and on the receiver's veth.

Every time is the kernel's CLOCK_REALTIME (the captures) or the trace's
global time (agents on --clock system, CLOCK_TAI, equal to CLOCK_REALTIME
on the hosts this was written on; the script checks their agreement on the
OK tags). Sequence numbers are unwrapped per flow (64-bit), so flows
crossing 2^32 are handled. Python 3 standard library only; tshark with
wireshark/nettrace/nettrace.lua decodes the trace.

Usage: tag_witness.py [--lua wireshark/nettrace/nettrace.lua] [--match BIN/nettrace-match]
                      [--worst N] [--jobs N] RUN_DIR...
"""

import argparse
import bisect
import collections
import concurrent.futures
import glob
import json
import os
import statistics
import subprocess
import sys

WINDOW_NS = 250_000_000  # nettrace-match's default --window
BASELINE_LEN = 64  # nettrace-match's one-way baseline (last unambiguous matches)
CLASSES = ("A", "C", "B", "OK", "unsent", "other")
CLASS_TEXT = {
    "A": "A  already sent at SENDMSG",
    "C": "C  superseded (no SND_SW)",
    "B": "B  sent before the tag's SCHED",
    "OK": "OK first send is the tag's",
    "unsent": "   byte never sent (end of flow)",
    "other": "   other (SCHED only / no capture)",
}
TX_SENDMSG, TX_SCHED, TX_SND_SW, TX_ACK = 0, 1, 2, 4
KIND_TX, KIND_RX, KIND_TCP = 1, 3, 5


# --------------------------------------------------------------------------
# Reading: tshark on the captures and on the trace (cached next to them).
# --------------------------------------------------------------------------

def epoch_ns(text):
    """frame.time_epoch ("1795595039.005982428") as integer ns."""
    sec, _, frac = text.partition(".")
    return int(sec) * 1_000_000_000 + int((frac + "000000000")[:9])


def tshark_rows(args, cache, lua_check=False):
    """Rows (lists of fields) of a tshark -T fields run, cached in `cache`
    (reused while newer than the input file, the last argument after -r)."""
    src = args[args.index("-r") + 1]
    if os.path.exists(cache) and os.path.getmtime(cache) >= os.path.getmtime(src):
        with open(cache) as f:
            return [line.rstrip("\n").split("\t") for line in f]
    p = subprocess.run(["tshark", *args], capture_output=True, text=True)
    if p.returncode != 0 or (lua_check and "Lua: " in p.stderr):
        sys.exit(f"tshark failed on {src}:\n{p.stderr}")
    tmp = cache + ".tmp"
    with open(tmp, "w") as f:
        f.write(p.stdout)
    os.replace(tmp, cache)
    return [line.split("\t") for line in p.stdout.splitlines()]


CAPTURE_FIELDS = ["frame.time_epoch", "ip.src", "ipv6.src", "tcp.srcport", "ip.dst", "ipv6.dst",
                  "tcp.dstport", "tcp.seq_raw", "tcp.len"]


def read_capture(path):
    """Data segments of a capture: (t_ns, (src, sport, dst, dport), seq, len)."""
    args = ["-n", "-r", path, "-o", "tcp.relative_sequence_numbers:FALSE",
            "-o", "tcp.analyze_sequence_numbers:FALSE", "-o", "tcp.desegment_tcp_streams:FALSE",
            "-Y", "tcp.len > 0", "-T", "fields", "-E", "occurrence=f"]
    for f in CAPTURE_FIELDS:
        args += ["-e", f]
    out = []
    for r in tshark_rows(args, path + ".segments.tsv"):
        if len(r) < 9 or not r[7]:
            continue
        src, dst = r[1] or r[2], r[4] or r[5]
        out.append((epoch_ns(r[0]), (src, int(r[3]), dst, int(r[6])), int(r[7]), int(r[8])))
    out.sort(key=lambda s: s[0])
    return out


# One pass over the trace: TX events, RX STACK_ENTRY of TCP, TCP anomalies.
TRACE_FIELDS = [
    "nettrace.kind", "nettrace.host",
    # TX
    "nettrace.stage", "nettrace.global_ns", "nettrace.cookie", "nettrace.tskey", "nettrace.seq",
    "nettrace.saddr", "nettrace.saddr6", "nettrace.sport", "nettrace.daddr", "nettrace.daddr6",
    "nettrace.dport",
    # RX (the flow as the packet travelled: saddr is the sender)
    "nettrace.rx.global_ns", "nettrace.rx.seq", "nettrace.rx.end_seq",
    "nettrace.rx.saddr", "nettrace.rx.saddr6", "nettrace.rx.sport",
    "nettrace.rx.daddr", "nettrace.rx.daddr6", "nettrace.rx.dport",
    # TCP anomaly (RETRANSMIT = 0; the socket's flow, local -> remote)
    "nettrace.tcp.anomaly", "nettrace.tcp.global_ns", "nettrace.tcp.seq", "nettrace.tcp.end_seq",
    "nettrace.tcp.saddr", "nettrace.tcp.saddr6", "nettrace.tcp.sport",
    "nettrace.tcp.daddr", "nettrace.tcp.daddr6", "nettrace.tcp.dport",
]
COL = {name: i for i, name in enumerate(TRACE_FIELDS)}


def read_trace(path, lua):
    """TX events, RX STACK_ENTRY data skbs and TCP RETRANSMIT events."""
    flt = ("nettrace.kind == 1 || (nettrace.kind == 5 && nettrace.tcp.anomaly == 0) || "
           "(nettrace.kind == 3 && nettrace.rx.stage == 0 && nettrace.rx.protocol == 6 "
           "&& nettrace.rx.seq != nettrace.rx.end_seq)")
    args = ["-n", "-X", f"lua_script:{lua}", "-o", "nettrace.peer_links:FALSE",
            "-o", "nettrace.ip_stats:FALSE", "-r", path, "-Y", flt,
            "-T", "fields", "-E", "occurrence=f"]
    for f in TRACE_FIELDS:
        args += ["-e", f]
    tx, rx, retx = [], [], []
    for r in tshark_rows(args, path + ".witness.tsv", lua_check=True):
        if len(r) < len(TRACE_FIELDS):
            continue
        g = lambda name: r[COL[name]]
        kind = int(g("nettrace.kind"))
        if kind == KIND_TX:
            flow = (g("nettrace.saddr") or g("nettrace.saddr6"), int(g("nettrace.sport")),
                    g("nettrace.daddr") or g("nettrace.daddr6"), int(g("nettrace.dport")))
            tx.append(dict(host=g("nettrace.host"), stage=int(g("nettrace.stage")),
                           t=int(g("nettrace.global_ns")), cookie=int(g("nettrace.cookie")),
                           tskey=int(g("nettrace.tskey")), seq=int(g("nettrace.seq")), flow=flow))
        elif kind == KIND_RX:
            flow = (g("nettrace.rx.saddr") or g("nettrace.rx.saddr6"), int(g("nettrace.rx.sport")),
                    g("nettrace.rx.daddr") or g("nettrace.rx.daddr6"), int(g("nettrace.rx.dport")))
            rx.append(dict(host=g("nettrace.host"), t=int(g("nettrace.rx.global_ns")), flow=flow,
                           seq=int(g("nettrace.rx.seq")), end=int(g("nettrace.rx.end_seq"))))
        elif kind == KIND_TCP:
            flow = (g("nettrace.tcp.saddr") or g("nettrace.tcp.saddr6"), int(g("nettrace.tcp.sport")),
                    g("nettrace.tcp.daddr") or g("nettrace.tcp.daddr6"), int(g("nettrace.tcp.dport")))
            retx.append(dict(host=g("nettrace.host"), t=int(g("nettrace.tcp.global_ns")), flow=flow,
                             seq=int(g("nettrace.tcp.seq")), end=int(g("nettrace.tcp.end_seq"))))
    for v in (tx, rx, retx):
        v.sort(key=lambda e: e["t"])
    return tx, rx, retx


def run_match(match_bin, trace):
    cache = trace + ".match.json"
    if not (os.path.exists(cache) and os.path.getmtime(cache) >= os.path.getmtime(trace)):
        p = subprocess.run([match_bin, "--json", trace], capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"nettrace-match failed on {trace}:\n{p.stderr}")
        with open(cache, "w") as f:
            f.write(p.stdout)
    with open(cache) as f:
        return json.load(f)


# --------------------------------------------------------------------------
# Sequence space of one flow.
# --------------------------------------------------------------------------

def s32(x):
    """A 32-bit difference as a signed number."""
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >= (1 << 31) else x


class FlowSeq:
    """One flow's sequence space, unwrapped (64-bit) with the sender-side
    capture as the reference: a 32-bit value seen at time t is read as the
    one nearest to what the sender was sending then (TCP windows are far
    below 2^31, so this is unambiguous). Also indexes the segments of both
    captures by the bytes they hold."""

    def __init__(self, sent, received):
        self.ref_t, self.ref_u = [], []
        last = None
        for t, _, seq, _ in sent:  # sorted by time
            u = seq if last is None else last + s32(seq - last)
            self.ref_t.append(t)
            self.ref_u.append(u)
            last = u
        self.sent = self._index(sent)
        self.received = self._index(received)
        # The sender's segments by time: (t, start, end).
        self.sent_by_time = sorted((t, s, e) for s, e, t in self.sent["rows"])
        self.sent_times = [r[0] for r in self.sent_by_time]

    def __bool__(self):
        return bool(self.ref_t)

    def unwrap(self, x, t):
        i = bisect.bisect_left(self.ref_t, t)
        i = min(max(i, 0), len(self.ref_t) - 1)
        r = self.ref_u[i]
        return r + s32(x - r)

    def _index(self, segs):
        rows = sorted((self.unwrap(seq, t), self.unwrap(seq, t) + n, t) for t, _, seq, n in segs) \
            if self.ref_t else []
        return dict(starts=[r[0] for r in rows], rows=rows,
                    span=max((r[1] - r[0] for r in rows), default=0))

    def sent_between(self, t0, t1):
        """The sender's segments that crossed the veth in [t0, t1]."""
        i = bisect.bisect_left(self.sent_times, t0)
        j = bisect.bisect_right(self.sent_times, t1)
        return self.sent_by_time[i:j]

    @staticmethod
    def holding(index, b):
        """Segments [start, end) holding byte b, as (t, start, end), by time."""
        hi = bisect.bisect_right(index["starts"], b)
        lo = bisect.bisect_left(index["starts"], b - index["span"])
        return sorted((t, s, e) for s, e, t in index["rows"][lo:hi] if s <= b < e)


# --------------------------------------------------------------------------
# Tags and their classes.
# --------------------------------------------------------------------------

def build_tags(tx):
    """One tag per SENDMSG; each later SCHED/SND_SW/ACK of the same (host,
    cookie, tskey) belongs to the latest SENDMSG of that key before it (a
    key can be tagged again when a sendmsg re-tags the same skb)."""
    tags, current, orphans = [], {}, collections.Counter()
    for e in tx:
        key = (e["host"], e["cookie"], e["tskey"])
        if e["stage"] == TX_SENDMSG:
            tag = dict(key=key, host=e["host"], cookie=e["cookie"], tskey=e["tskey"], seq=e["seq"],
                       flow=e["flow"], sendmsg=e["t"], sched=[], sndsw=[], ack=[])
            tags.append(tag)
            current[key] = tag
            continue
        tag = current.get(key)
        if tag is None:
            orphans[e["stage"]] += 1
            continue
        {TX_SCHED: tag["sched"], TX_SND_SW: tag["sndsw"], TX_ACK: tag["ack"]}.get(
            e["stage"], []).append(e["t"])
    return tags, orphans


def classify(tag, fs):
    """Sets tag["cls"] and the capture evidence of byte tskey."""
    b = fs.unwrap(tag["tskey"], tag["sendmsg"])
    tag["b"] = b
    segs = FlowSeq.holding(fs.sent, b)
    tag["segs"] = segs
    first = segs[0][0] if segs else None
    if first is not None and first < tag["sendmsg"]:
        tag["cls"] = "A"
    elif not tag["sndsw"]:
        tag["cls"] = "other" if tag["sched"] else "C" if segs else "unsent"
    elif first is None:
        tag["cls"] = "other"
    else:
        start = tag["sched"][0] if tag["sched"] else tag["sndsw"][0]
        tag["cls"] = "B" if first < start else "OK"
        if tag["cls"] == "B":
            tag["early_ns"] = start - first
            # What the tag's own SCHED..SND_SW stamped, as the capture saw
            # it: a resend of byte tskey, other bytes, or nothing.
            own = fs.sent_between(start, tag["sndsw"][0])
            tag["own"] = own
            # tcp_grow_skb() signature: the tag's own send starts exactly
            # where the segment that carried byte tskey ended.
            tag["contiguous"] = any(s == segs[0][2] for _, s, e in own)
            # ... and the segment that carried it began before the tag's
            # first byte: an earlier skb took the tagged skb's head.
            tag["head_taken"] = segs[0][1] < fs.unwrap(tag["seq"], tag["sendmsg"])
            if any(s <= b < e for _, s, e in own):
                tag["b_kind"] = "resend of tskey"
            elif own:
                tag["b_kind"] = "bytes after tskey" if all(s > b for _, s, e in own) else \
                    "bytes before tskey" if all(e <= b for _, s, e in own) else "other bytes"
            else:
                tag["b_kind"] = "nothing captured"
        else:
            # The witness: the capture stamp of the tag's own transmission
            # against its SND_SW (the capture tap runs just before it).
            tag["cap_minus_sndsw"] = first - tag["sndsw"][0]
            tag["cap_minus_sched"] = first - start


# --------------------------------------------------------------------------
# nettrace-match's rule, replayed to list the violating transmissions.
# --------------------------------------------------------------------------

def replay_matcher(tags, rx_by_flow, flowseq):
    """Every SND_SW of a tag is a transmission; it matches the receiver's
    STACK_ENTRY skb holding byte tskey within +-window; with one candidate
    and no later transmission of the same skb, that one; else the one whose
    one-way delay is closest to the pair's median of recent unambiguous
    matches, leaving to a later transmission of the same skb an RX skb
    closer to it, and never one an earlier transmission of the same skb
    took (tracer-match/src/matcher/decide.rs, Matcher::decide). Returns
    (transmission, chosen rx) pairs with a negative one-way delay."""
    trans = []  # (SND_SW time, tag)
    for tag in tags:
        for t in tag["sndsw"]:
            trans.append((t, tag))
    trans.sort(key=lambda x: x[0])
    by_key = collections.defaultdict(list)
    for t, tag in trans:
        by_key[tag["key"]].append(t)
    claimed = collections.defaultdict(set)
    baselines = collections.defaultdict(lambda: collections.deque(maxlen=BASELINE_LEN))
    seen = collections.Counter()
    violations, decided = [], collections.Counter()
    for t, tag in trans:
        key = tag["key"]
        index = seen[key]
        seen[key] += 1
        fs = flowseq.get(tag["flow"])
        rxs = rx_by_flow.get(tag["flow"])
        if not fs or not rxs:
            continue
        b = fs.unwrap(tag["tskey"], t)
        later = [u for u in by_key[key][index + 1:] if u - t <= WINDOW_NS]
        cands = [r for r in rxs["index"].holding_rx(b, t - WINDOW_NS, t + WINDOW_NS)
                 if r["id"] not in claimed[key]]
        pair = (tag["host"], rxs["host"])
        decided[pair] += 1
        best = None
        if len(cands) == 1 and not later:
            best = cands[0]
            if index == 0:
                baselines[pair].append(best["t"] - t)
        elif cands:
            base = sorted(baselines[pair])[len(baselines[pair]) // 2] if baselines[pair] else 0
            cost = lambda arrival, at: abs(arrival - at - base)
            bc = None
            for r in cands:
                c = cost(r["t"], t)
                if any(cost(r["t"], u) < c for u in later):
                    continue
                if bc is None or c < bc:
                    best, bc = r, c
        if best is None:
            continue
        claimed[key].add(best["id"])
        if best["t"] < t:
            violations.append(dict(tag=tag, t=t, index=index, rx=best, oneway=best["t"] - t,
                                   pair=pair, b=b))
    return violations


class RxIndex:
    """A receiver's STACK_ENTRY data skbs of one flow, by the bytes they hold."""

    def __init__(self, rx, fs):
        rows = []
        for i, r in enumerate(rx):
            s = fs.unwrap(r["seq"], r["t"])
            rows.append((s, s + ((r["end"] - r["seq"]) & 0xFFFFFFFF), r["t"], i))
            r["start_u"] = rows[-1][0]
        rows.sort()
        self.rows, self.rx = rows, rx
        self.starts = [r[0] for r in rows]
        self.span = max((r[1] - r[0] for r in rows), default=0)

    def holding_rx(self, b, lo, hi):
        i0 = bisect.bisect_left(self.starts, b - self.span)
        i1 = bisect.bisect_right(self.starts, b)
        return [self.rx[i] for s, e, t, i in self.rows[i0:i1] if s <= b < e and lo <= t <= hi]


# --------------------------------------------------------------------------
# One run.
# --------------------------------------------------------------------------

def load_runs(dirs, lua, match_bin, jobs):
    """Reads the run directories: every tshark and nettrace-match call of
    every run goes to one pool (tshark is single-threaded)."""
    runs, futures = [], []
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as ex:
        for d in dirs:
            with open(os.path.join(d, "run.json")) as f:
                meta = json.load(f)
            traces = sorted(glob.glob(os.path.join(d, "trace-*.pcapng"))
                            + glob.glob(os.path.join(d, "trace-*.pcapng.zst")))
            if len(traces) != 1:
                sys.exit(f"{d}: expected one trace-*.pcapng(.zst), found {len(traces)}")
            run = dict(dir=d, meta=meta, caps={})
            # The slow one (the trace through the Lua dissector) first.
            futures.append((run, "trace", ex.submit(read_trace, traces[0], lua)))
            futures.append((run, "match", ex.submit(run_match, match_bin, traces[0])))
            for h, v in meta["hosts"].items():
                futures.append((run, ("cap", h), ex.submit(read_capture, os.path.join(d, v["capture"]))))
            runs.append(run)
        for run, what, fut in futures:
            r = fut.result()
            if what == "trace":
                run["tx"], run["rx"], run["retx"] = r
            elif what == "match":
                run["match"] = r
            else:
                run["caps"][what[1]] = r
    return runs


def pct(v, p):
    if not v:
        return None
    v = sorted(v)
    return v[min(len(v) - 1, max(0, int(round(p / 100 * (len(v) - 1)))))]


def us(ns):
    return "-" if ns is None else f"{ns / 1000:+.1f}"


def explained(v):
    """A violation is explained when its tag is A or B and the capture shows
    byte tskey crossing the sender's veth before the matched reception and
    before the tag's first SCHED: the RX skb carried an earlier send."""
    return v["tag"]["cls"] in ("A", "B") and v["earlier_segment"]


def why(v):
    """The explanation of a violation: A, B, or else "resend pairing" (the
    tag's own earlier send of the byte, captured before the matched
    reception: the matcher gave a resend the reception of the first send)
    or "unexplained <class>"."""
    if explained(v):
        return v["tag"]["cls"]
    if v["index"] > 0 and v["own_earlier_send"]:
        return "resend pairing"
    return "unexplained " + v["tag"]["cls"]


def analyse_run(run, worst):
    meta = run["meta"]
    host_of_addr = {v["addr"]: h for h, v in meta["hosts"].items()}
    # Segments of each flow (as the data travelled) on each end's capture.
    sent, received = collections.defaultdict(list), collections.defaultdict(list)
    for host, segs in run["caps"].items():
        addr = meta["hosts"][host]["addr"]
        for s in segs:
            flow = s[1]
            if flow[0] == addr:
                sent[flow].append(s)
            elif flow[2] == addr:
                received[flow].append(s)
    flowseq = {f: FlowSeq(sent[f], received.get(f, [])) for f in sent}

    tags, orphans = build_tags(run["tx"])
    uncaptured_flows = set()
    for tag in tags:
        fs = flowseq.get(tag["flow"])
        if not fs:
            uncaptured_flows.add(tag["flow"])
            tag["cls"] = "other"
            tag["segs"] = []
            continue
        classify(tag, fs)

    rx_by_flow = {}
    rx_flows = collections.defaultdict(list)
    for r in run["rx"]:
        rx_flows[(r["flow"], r["host"])].append(r)
    for (flow, host), rs in rx_flows.items():
        fs = flowseq.get(flow)
        if fs and host_of_addr.get(flow[2]) == host:
            for i, r in enumerate(rs):
                r["id"] = (host, i)
            rx_by_flow[flow] = dict(host=host, index=RxIndex(rs, fs))
    violations = replay_matcher(tags, rx_by_flow, flowseq)

    retx_by_flow = collections.defaultdict(list)
    for r in run["retx"]:
        retx_by_flow[r["flow"]].append(r)

    # Per direction (sender -> receiver host).
    def direction(flow):
        return f"{host_of_addr.get(flow[0], flow[0])}→{host_of_addr.get(flow[2], flow[2])}"

    dirs = collections.OrderedDict()
    for tag in tags:
        d = dirs.setdefault(direction(tag["flow"]), dict(n=0, cls=collections.Counter(),
                                                          wit=[], wit_sched=[], early=[],
                                                          b_kind=collections.Counter(),
                                                          contiguous=0, head_taken=0))
        d["n"] += 1
        d["cls"][tag["cls"]] += 1
        if "cap_minus_sndsw" in tag:
            d["wit"].append(tag["cap_minus_sndsw"])
            d["wit_sched"].append(tag["cap_minus_sched"])
        if "early_ns" in tag:
            d["early"].append(tag["early_ns"])
            d["b_kind"][tag["b_kind"]] += 1
            d["contiguous"] += tag["contiguous"]
            d["head_taken"] += tag["head_taken"]
    matcher = {}
    for d in run["match"]["directions"]:
        if d.get("receiver") is None:
            continue
        v = d["violations"]
        matcher[f"{d['sender']}→{d['receiver']}"] = dict(count=v["count"], worst=v.get("worst_ns"),
                                                         worst_life=v.get("worst"))
    # Each violation is explained when the witness shows that the RX skb it
    # was matched to carried an earlier transmission of the byte: a segment
    # holding tskey crossed the sender's veth before that reception and
    # before the tag's first SCHED, and the tag is A or B.
    expl = collections.defaultdict(collections.Counter)
    for v in violations:
        tag = v["tag"]
        dname = direction(tag["flow"])
        segs = tag.get("segs", [])
        start = tag["sched"][0] if tag["sched"] else tag["sndsw"][0]
        earlier = [s for s in segs if s[0] <= v["rx"]["t"] and s[0] < start]
        v["earlier_segment"] = bool(earlier)
        v["own_earlier_send"] = any(start <= s[0] <= v["rx"]["t"] for s in segs)
        v["dir"] = dname
        v["why"] = why(v)
        expl[dname][v["why"]] += 1

    return dict(run=run, tags=tags, orphans=orphans, dirs=dirs, matcher=matcher,
                violations=violations, explained=expl, flowseq=flowseq, retx=retx_by_flow,
                uncaptured=uncaptured_flows, host_of_addr=host_of_addr, worst=worst)


# --------------------------------------------------------------------------
# Printing.
# --------------------------------------------------------------------------

def share(c, n):
    return f"{c:6d} {100 * c / n:5.1f}%" if n else f"{c:6d}     -"


def print_run(res):
    run = res["run"]
    meta = run["meta"]
    cond = f"loss 1 in {meta['loss_one_in']} (client→server)" if meta["loss_one_in"] else "no loss"
    print(f"\n== {run['dir']}: {cond}, iperf3 --bidir {meta['secs']}s, rate {meta['rate']}")
    names = list(res["dirs"])
    print(f"   {'SENDMSG tags by class':36s}" + "".join(f"{n:>20s}" for n in names))
    print(f"   {'tags':36s}" + "".join(f"{res['dirs'][n]['n']:>20d}" for n in names))
    for c in CLASSES:
        print(f"   {CLASS_TEXT[c]:36s}" + "".join(
            f"{share(res['dirs'][n]['cls'][c], res['dirs'][n]['n']):>20s}" for n in names))
    for n in names:
        d = res["dirs"][n]
        if d["wit"]:
            w, ws = d["wit"], d["wit_sched"]
            inside = sum(1 for a, b in zip(w, ws) if a <= 0 <= b) / len(w)
            print(f"   {n}: OK tags, capture − SND_SW p1/p50/p99 {us(pct(w, 1))}/{us(pct(w, 50))}/"
                  f"{us(pct(w, 99))} µs; capture within [SCHED, SND_SW] for {100 * inside:.1f}%")
        if d["early"]:
            e = d["early"]
            print(f"   {n}: B tags, byte tskey out before the tag's SCHED by p50 {us(pct(e, 50))} µs"
                  f" (min {us(min(e))}, max {us(max(e))}); what the tag's own SCHED..SND_SW sent: "
                  + ", ".join(f"{k} {c}" for k, c in d["b_kind"].most_common())
                  + f"; starting right where the segment carrying tskey ended: {d['contiguous']};"
                  f" that segment starting before the tag's first byte: {d['head_taken']}")
    if res["orphans"]:
        print(f"   TX events without a SENDMSG of their key before them: {dict(res['orphans'])}")
    if res["uncaptured"]:
        print(f"   flows without capture (tags counted as other): {sorted(res['uncaptured'])}")

    print("   causality violations (one-way < 0):")
    mine = collections.Counter(v["dir"] for v in res["violations"])
    for n in sorted(set(res["matcher"]) | set(mine)):
        m = res["matcher"].get(n, {})
        e = res["explained"].get(n, collections.Counter())
        parts = ", ".join(f"{k} {c}" for k, c in sorted(e.items())) or "-"
        mine_worst = min((v for v in res["violations"] if v["dir"] == n), key=lambda v: v["oneway"],
                         default=None)
        life = m.get("worst_life") or {}
        same = "" if mine_worst is None or not life else \
            " (same worst tskey)" if life.get("tskey") == mine_worst["tag"]["tskey"] else \
            f" (replay's worst: tskey {mine_worst['tag']['tskey']}, {us(mine_worst['oneway'])} µs)"
        print(f"     {n}: nettrace-match {m.get('count', '-')} (worst {us(m.get('worst'))} µs);"
              f" replayed {mine[n]}{same}: explained by {parts}")
    ordered = sorted(res["violations"], key=lambda v: v["oneway"])
    shown = ordered[:res["worst"]]
    if shown:
        print(f"   the {len(shown)} worst violations, with the capture as witness:")
    for v in shown:
        print_evidence(res, v)
    odd = [v for v in ordered if not explained(v)]
    if odd:
        print(f"   violations not explained by A or B ({len(odd)}; up to 5 shown):")
    for v in odd[:5]:
        print_evidence(res, v)


def fmt_seg(t, s, e, t0, fs, raw_of):
    return f"{us(t - t0):>12s}  [{raw_of(s)}, {raw_of(e)})  {e - s:6d} B"


def print_evidence(res, v):
    tag = v["tag"]
    fs = res["flowseq"][tag["flow"]]
    t0 = tag["sendmsg"]
    raw = lambda u: u & 0xFFFFFFFF
    f = tag["flow"]
    print(f"\n     {v['dir']} tskey {tag['tskey']} (flow {f[0]}:{f[1]} > {f[2]}:{f[3]}, cookie "
          f"{tag['cookie']}): class {tag['cls']}, one-way {us(v['oneway'])} µs; send #{v['index'] + 1} "
          f"of the key; times in µs since its SENDMSG")
    print(f"       trace   SENDMSG {us(0)} (seq {tag['seq']}..tskey {tag['tskey']}, "
          f"{raw(tag['tskey'] - tag['seq']) + 1} B)"
          + "".join(f"  SCHED {us(t - t0)}" for t in tag["sched"][:3])
          + "".join(f"  SND_SW {us(t - t0)}" for t in tag["sndsw"][:3]))
    r = v["rx"]
    print(f"       matched STACK_ENTRY {us(r['t'] - t0)}  [{r['seq']}, {r['end']})  "
          f"{raw(r['end'] - r['seq'])} B")
    segs = tag.get("segs", [])
    print(f"       sender veth, segments holding tskey ({len(segs)}):")
    for t, s, e in segs[:6]:
        print("         " + fmt_seg(t, s, e, t0, fs, raw))
    if tag["sched"] and tag["sndsw"]:
        own = fs.sent_between(tag["sched"][0], tag["sndsw"][0])
        print(f"       sender veth, segments between the tag's first SCHED and SND_SW (its own send): "
              f"{len(own)}")
        for t, s, e in own[:4]:
            print("         " + fmt_seg(t, s, e, t0, fs, raw) + f"  (tskey at {s32(v['b'] - s):+d})")
    rsegs = FlowSeq.holding(fs.received, v["b"])
    print(f"       receiver veth, segments holding tskey ({len(rsegs)}):")
    for t, s, e in rsegs[:6]:
        print("         " + fmt_seg(t, s, e, t0, fs, raw))
    rt = [x for x in res["retx"].get(f, [])
          if fs.unwrap(x["seq"], x["t"]) <= v["b"] < fs.unwrap(x["seq"], x["t"]) + raw(x["end"] - x["seq"])]
    if rt:
        print("       TCP RETRANSMIT events covering tskey: " + "; ".join(
            f"{us(x['t'] - t0)} [{x['seq']}, {x['end']})" for x in rt[:4]))
    verdict = {
        "A": "A: the tag landed on an skb already sent; the reception carried that earlier send",
        "B": "B: byte tskey went out before the tag's SCHED; the reception carried that earlier send",
        "resend pairing": "the tag's own earlier send carried tskey and arrived before this resend: "
                          "the match paired this resend with the first send's reception",
    }.get(v["why"], "not explained")
    print(f"       → {verdict}")


def median_or_dash(values, fmt="{:.1f}"):
    return fmt.format(statistics.median(values)) if values else "-"


def print_summary(results):
    print("\n== medians over runs (per condition and direction)")
    by_cond = collections.OrderedDict()
    for res in results:
        cond = "loss" if res["run"]["meta"]["loss_one_in"] else "no loss"
        by_cond.setdefault(cond, []).append(res)
    for cond, rs in by_cond.items():
        names = sorted({n for r in rs for n in r["dirs"]} | {n for r in rs for n in r["matcher"]})
        print(f"   {cond + f' ({len(rs)} runs)':32s}" + "".join(f"{n:>28s}" for n in names))
        row = lambda label, f: print(f"   {label:32s}" + "".join(f"{f(n):>28s}" for n in names))
        row("tags (SENDMSG)", lambda n: median_or_dash(
            [r["dirs"][n]["n"] for r in rs if n in r["dirs"]], "{:.0f}"))
        for c in CLASSES:
            row(f"{c} share %: median", lambda n, c=c: median_or_dash(
                [100 * r["dirs"][n]["cls"][c] / r["dirs"][n]["n"] for r in rs
                 if n in r["dirs"] and r["dirs"][n]["n"]], "{:.2f}"))
            row("  tags per run", lambda n, c=c: ",".join(
                str(r["dirs"][n]["cls"][c]) for r in rs if n in r["dirs"]))
        row("violations, nettrace-match: median", lambda n: median_or_dash(
            [r["matcher"][n]["count"] for r in rs if n in r["matcher"]], "{:.0f}"))
        row("  per run", lambda n: ",".join(
            str(r["matcher"][n]["count"]) for r in rs if n in r["matcher"]))
        row("replayed, per run", lambda n: ",".join(
            str(sum(1 for v in r["violations"] if v["dir"] == n)) for r in rs))
        row("  explained by A", lambda n: ",".join(str(r["explained"][n]["A"]) for r in rs))
        row("  explained by B", lambda n: ",".join(str(r["explained"][n]["B"]) for r in rs))
        row("  resend pairing", lambda n: ",".join(
            str(r["explained"][n]["resend pairing"]) for r in rs))
        row("  not explained", lambda n: ",".join(
            str(sum(c for k, c in r["explained"][n].items() if k.startswith("unexplained")))
            for r in rs))
        row("worst one-way µs per run", lambda n: ",".join(
            f"{r['matcher'][n]['worst'] / 1000:.0f}" if n in r["matcher"] and r["matcher"][n]["count"]
            else "-" for r in rs))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="run directories of bench/tag-witness.sh")
    ap.add_argument("--lua", default="wireshark/nettrace/nettrace.lua")
    ap.add_argument("--match", default="target/release/nettrace-match")
    ap.add_argument("--worst", type=int, default=3, help="violations shown with evidence per run")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="runs decoded at once (tshark is single-threaded)")
    a = ap.parse_args()
    runs = [d for d in a.runs if os.path.isfile(os.path.join(d, "run.json"))]
    if not runs:
        sys.exit("no run directories (with run.json) given")
    print(f"decoding {len(runs)} runs with tshark + {a.lua} ({a.jobs} at once; cached next to each file)")
    loaded = load_runs(runs, a.lua, a.match, a.jobs)
    results = []
    for run in loaded:
        res = analyse_run(run, a.worst)
        print_run(res)
        results.append(res)
    print_summary(results)


if __name__ == "__main__":
    main()
