"""A plain-Python reference implementation of every verdict in docs/history-format.md.

Deliberately written the naive way (dicts, sets, a sort per stream) so that it is easy to
check by eye; the Spark job in brokerchaos.analysis.metrics must agree with it exactly.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict


def _percentile(sorted_vals: list[float], q: float) -> float:
    # linear interpolation between closest ranks, as Spark's exact percentile()
    pos = q * (len(sorted_vals) - 1)
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def _lat(vals: list[float]):
    if not vals:
        return None
    s = sorted(vals)
    return {"p50": _percentile(s, 0.5), "p99": _percentile(s, 0.99), "p999": _percentile(s, 0.999), "max": s[-1]}


def _windows(nem: list[dict], t_end: int) -> list[tuple[int, int]]:
    """A heal ends the fault with its window id; without ids (before format 1.1), the open
    id-less faults with its action (detail's first word), else all open id-less ones."""
    nem = sorted(nem, key=lambda r: (r["t_ns"], r["type"] != "fault"))
    action = [(r["detail"] or "").split()[:1] for r in nem]
    end = {}
    for i, r in enumerate(nem):
        if r["type"] != "heal":
            continue
        still_open = [j for j in range(i) if nem[j]["type"] == "fault" and j not in end]
        if r.get("window") is not None:
            for j in still_open:
                if nem[j].get("window") == r["window"]:
                    end[j] = r["t_ns"]
            continue
        still_open = [j for j in still_open if nem[j].get("window") is None]
        same = [j for j in still_open if action[j] == action[i]]
        for j in same or still_open:
            end[j] = r["t_ns"]
    return [(r["t_ns"], end.get(j, t_end)) for j, r in enumerate(nem) if r["type"] == "fault"]


def _gaps(times: list[int]) -> list[tuple[int, int]]:
    s = sorted(times)
    return list(zip(s, s[1:]))


def agreed(spark_analyze, rows: list[dict], tmp_path, keys) -> dict:
    """One run's verdict through the Spark job, after checking it says what the oracle
    says on each of `keys`."""
    (v,) = spark_analyze(rows, tmp_path).verdicts
    (o,) = analyze(rows)
    for k in keys:
        assert v[k] == o[k], (k, v[k], o[k])
    return v


def analyze(rows: list[dict]) -> list[dict]:
    by_run: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_run[r["run"]].append(r)
    return [_run(run, by_run[run], i) for i, run in enumerate(sorted(by_run), 1)]


def _session(run: str, position: int, rows: list[dict], windows: list, live_gaps: list, outages: list) -> dict:
    """The VerneMQ seed's per-run columns, as docs/history-format.md defines them."""
    digits = re.search(r"(\d+)$", run)
    nem = sorted((r for r in rows if r["type"] in ("fault", "heal")), key=lambda r: (r["t_ns"], r["type"] != "fault"))
    faults = [r for r in nem if r["type"] == "fault"]
    tf, te = windows[0] if windows else (None, None)
    killed = faults[0]["node"] if faults else None

    def node_of(kind, last_before):
        rs = [r for r in rows if r["type"] == kind and r["node"] is not None]
        key = lambda r: (r["t_ns"], r["client"], r["seq"])
        if last_before is not None:
            before = [r for r in rs if r["t_ns"] <= last_before]
            if before:
                return max(before, key=key)["node"]
        return min(rs, key=key)["node"] if rs else None

    txm, rxm = node_of("send", tf), node_of("recv", tf)
    sends = [r["t_ns"] for r in rows if r["type"] == "send"]
    acks = [r["t_ns"] for r in rows if r["type"] == "ack"]
    t_send = min(sends) if sends else None
    t_eos = max(acks) if acks else None
    readies = [r["t_ns"] for r in rows if r["type"] == "ready" and tf is not None and r["t_ns"] >= tf]
    t_ready = min(readies) if readies else None

    def sec(a, b):
        return None if a is None or b is None else (b - a) / 1e9

    hit = set(re.split(r"[,|]", killed)) if killed else set()
    tx_down = outages[0] / 1e3 if txm in hit and outages and outages[0] is not None else None
    rx = [b - max(a, tf) for a, b in live_gaps if tf is not None and b > tf and a <= te]
    return {
        "seq_ix": int(digits.group(1)) if digits else position,
        "killed_node": killed,
        "runtime_s": sec(t_send, t_ready),
        "txtime_s": sec(t_send, t_eos),
        "gaptime_s": sec(tf, t_eos),
        "downtime_s": sec(tf, t_ready),
        "tx_downtime_s": tx_down,
        "rx_downtime_s": max(rx) / 1e9 if rx else None,
        "txm": txm,
        "rxm": rxm,
    }


def _run(run: str, rows: list[dict], position: int = 1) -> dict:
    # observers (a subscribe row "observer") measure the consumer side, consumer groups'
    # members (a subscribe row naming a group) are judged by the group verdicts; the other
    # verdicts are the others'
    # replica readers (a subscribe row "replica", format 1.12): one node's copy each, judged
    # by the replica verdicts alone
    replica_of = {r["client"]: r["node"] or "?" for r in rows if r["type"] == "subscribe"
                  and r["detail"] == "replica" and r.get("group") is None}
    replica_rows = [r for r in rows if r["client"] in replica_of]
    rows = [r for r in rows if r["client"] not in replica_of]
    outputs = {r["client"] for r in rows if r["type"] == "subscribe" and r.get("group") is not None
               and r["detail"] == "output"}
    group_of = {r["client"]: r["group"] for r in rows if r["type"] == "subscribe" and r.get("group") is not None
                and r["client"] not in outputs}
    observers = {r["client"] for r in rows if r["type"] == "subscribe" and r["detail"] == "observer"
                 and r.get("group") is None} - set(group_of)
    observed = [r for r in rows if r["client"] in observers]
    members = [r for r in rows if r["client"] in group_of]
    output_rows = [r for r in rows if r["client"] in outputs]
    rows = [r for r in rows if r["client"] not in observers and r["client"] not in group_of
            and r["client"] not in outputs] + _taken(rows, group_of)
    v = _checked(run, rows, position, [r for r in observed + members if r["type"] == "recv"])
    v.update(_groups(rows, members, group_of, v["_windows"]))
    v.update(_txns(rows))
    v.update(_eos(rows, output_rows, outputs))
    v.update(_replicas(rows, replica_rows, replica_of))
    v["result"] = _result(v)
    v["live_consumers"] = len(observers)
    v["live_recv_rows"] = sum(1 for r in observed if r["type"] == "recv")
    v["live_duplicates"] = v["live_redeliveries"] = 0
    for c in observers:
        got = [(r["producer"], r["value"], r["offset"]) for r in observed if r["type"] == "recv"
               and r["client"] == c and r["producer"] is not None and r["value"] is not None]
        v["live_duplicates"] += len(got) - len({g[:2] for g in got})
        at = [g for g in got if g[2] is not None]
        v["live_redeliveries"] += len(at) - len(set(at))
    ends = sorted({r["detail"] for r in observed if r["type"] == "read_end"})
    v["live_read_status"] = "; ".join(ends) if ends else None
    return v


def _replicas(rows: list[dict], replica_rows: list[dict], replica_of: dict) -> dict:
    """The replica figures (docs/history-format.md, "Replicas"), the naive way."""
    if not replica_of:
        return {"replica_reads": 0, "replica_reads_complete": None, "diverged_positions": None,
                "diverged_acked": None, "replicas_diverged": None, "acked_on_no_replica": None}
    end = {n: None for n in replica_of.values()}
    for r in replica_rows:
        if r["type"] == "read_end":
            end[replica_of[r["client"]]] = r["detail"]

    def finished(d):
        return d is not None and (d == "complete" or d.startswith("complete:"))
    done = {n for n, d in end.items() if finished(d)}
    got = [(replica_of[r["client"]], r.get("partition") or "", r["offset"], (r["producer"], r["value"]))
           for r in replica_rows if r["type"] == "recv"]
    at: dict = defaultdict(set)
    for _, part, off, m in got:
        if off is not None:
            at[(part, off)].add(m)
    acked = {(r["producer"], r["value"]) for r in rows if r["type"] == "ack"}
    on: dict = defaultdict(set)  # (partition, message) -> finished replicas holding it
    parts_of: dict = defaultdict(set)  # partition -> finished replicas that read some of it
    for n, part, _, m in got:
        if n in done:
            on[(part, m)].add(n)
            parts_of[part].add(n)
    some = sum(1 for (part, m), ns in on.items() if m in acked
               and ns < (parts_of[part] | (done if part == "" else set())))
    positions = sum(1 for ms in at.values() if len(ms) > 1)
    anywhere = {m for _, _, _, m in got}
    return {"replica_reads": len(end), "replica_reads_complete": all(finished(d) for d in end.values()),
            "diverged_positions": positions, "diverged_acked": some, "replicas_diverged": positions + some,
            "acked_on_no_replica": len(acked - anywhere)}


def _taken(rows: list[dict], group_of: dict) -> list[dict]:
    """A group whose subscribe detail ends `; takes` took out of the store each message its
    members' `acked` commits name: one recv row per message and group, as the group, counted
    with the checking read (loss, duplicates, their logs) and nowhere else (`_taken`)."""
    takes = {r["group"] for r in rows if r["type"] == "subscribe" and r.get("group") is not None
             and (r["detail"] or "").endswith("; takes")}
    first: dict = {}
    for r in rows:
        g = group_of.get(r["client"])
        if (g in takes and r["type"] == "commit" and r["detail"] == "acked" and r["producer"] is not None
                and r["value"] is not None):
            key = (g, r["producer"], r["value"])
            if key not in first or r["t_ns"] < first[key]["t_ns"]:
                first[key] = {**r, "client": g, "type": "recv", "offset": None, "node": None, "detail": None,
                              "_taken": True}
    return list(first.values())


def _checked(run: str, rows: list[dict], position: int, observed: list[dict]) -> dict:
    msgs: dict = defaultdict(lambda: {"sent": False, "ack": False, "nack": False, "unk": False,
                                      "recv": 0, "t_send": None, "t_ack": None, "t_recv": None,
                                      "offsets": []})
    for r in rows:
        ty = r["type"]
        if ty not in ("send", "ack", "nack", "unknown", "recv"):
            continue
        m = msgs[(r["producer"], r["value"])]
        t = r["t_ns"]
        if ty == "send":
            m["sent"] = True
            m["t_send"] = t if m["t_send"] is None else min(m["t_send"], t)
            t0 = t if r.get("intended_ns") is None else r["intended_ns"]
            m["t_lat0"] = t0 if m.get("t_lat0") is None else min(m["t_lat0"], t0)
        elif ty == "ack":
            m["ack"] = True
            m["t_ack"] = t if m["t_ack"] is None else min(m["t_ack"], t)
        elif ty == "nack":
            m["nack"] = True
        elif ty == "unknown":
            m["unk"] = True
        else:
            m["recv"] += 1
            if r["offset"] is not None:
                m["offsets"].append((r["client"], r["offset"]))
            m["t_recv"] = t if m["t_recv"] is None else min(m["t_recv"], t)
    sent = [m for m in msgs.values() if m["sent"]]
    v = {
        "run": run,
        "send_count": len(sent),
        "pos_ack_count": sum(m["ack"] for m in sent),
        "neg_ack_count": sum(m["nack"] and not m["ack"] and not m["unk"] for m in sent),
        "unknown_count": sum(m["unk"] and not m["ack"] for m in sent),
        "received": sum(m["recv"] for m in sent),
        "stowaways": sum(m["recv"] for m in msgs.values() if not m["sent"]),
        "acked_missing": sum(m["ack"] and m["recv"] == 0 for m in sent),
        "missing": sum(m["recv"] == 0 for m in sent),
        "received_no_ack": sum(m["recv"] > 0 and not m["ack"] for m in sent),
        # the seeds' programs: exactly one read and no positive ack (a message read twice is
        # counted under MsgsWithDups alone)
        "seed_received_no_ack": sum(m["recv"] == 1 and not m["ack"] for m in sent),
        "received_after_nack": sum(m["recv"] > 0 and not m["ack"] and m["nack"] and not m["unk"] for m in sent),
        "received_after_unknown": sum(m["recv"] > 0 and not m["ack"] and m["unk"] for m in sent),
        "msgs_with_dups": sum(m["recv"] > 1 for m in sent),
        "duplicate_deliveries": sum(m["recv"] - 1 for m in sent if m["recv"] > 0),
        "msgs_stored_twice": sum(len({o for _, o in m["offsets"]}) > 1 for m in sent),
        "dups_without_offsets": sum(m["recv"] > 1 and len(m["offsets"]) < m["recv"] for m in sent),
        "stored_duplicates": sum(max(0, len({o for _, o in m["offsets"]}) - 1) for m in sent),
        "redeliveries": sum(len(m["offsets"]) - len(set(m["offsets"])) for m in sent),
    }
    v["ack_count"] = v["pos_ack_count"] + v["neg_ack_count"]

    # ordering, per (consumer, producer, partition) stream in the consumer's seq order; in a
    # partition, a value's place is its rank among the producer's values read from it
    counts = {"jf": 0, "jb": 0, "djf": 0, "djb": 0, "jf0": 0}
    jumps = []
    streams: dict = defaultdict(list)
    held: dict = defaultdict(set)
    for r in rows:
        if r["type"] == "recv" and r["producer"] is not None and r["value"] is not None and not r.get("_taken"):
            streams[(r["client"], r["producer"], r.get("partition"))].append(r)
            held[(r["producer"], r.get("partition"))].add(r["value"])
    rank = {k: {v: i + 1 for i, v in enumerate(sorted(vs))} for k, vs in held.items() if k[1] is not None}
    for (client, producer, part), rs in streams.items():
        rs.sort(key=lambda r: r["seq"])
        seen: set = set()
        prev = None
        place = rank.get((producer, part))
        value_at = {i: v for v, i in place.items()} if place else {}
        for r in rs:
            val = r["value"] if place is None else place[r["value"]]
            dup = val in seen
            cls = None
            if prev is None:
                # the seeds' readers start from "the value before the first": a first read of
                # anything but 1 is a jump forward to them
                cls = "JF0" if val > 1 else None
            elif val > prev + 1:
                cls = "DJF" if dup else "JF"
            elif val <= prev:
                cls = "DJB" if dup else "JB"
            if cls:
                base = 0 if prev is None else prev
                base, to = (base, val) if place is None else (value_at.get(base, 0), r["value"])
                counts[cls.lower()] += 1
                jumps.append((client, producer, cls, base, to, abs(to - base), r["seq"]))
            seen.add(val)
            prev = val
    v.update(counts)
    v["out_of_order"] = v["jb"]
    v["_jumps"] = sorted(jumps, key=lambda j: (j[0], j[1], j[6]))

    # the duplicates log: every (producer, value) read more than once, stowaways included
    seen_at: dict = defaultdict(list)
    for r in rows:
        if r["type"] == "recv" and r["value"] is not None:
            seen_at[(r["producer"], r["value"])].append((r["client"], r["seq"], r["offset"]))
    v["_dups"] = sorted(
        (producer, value, len(at), " ".join(c if o is None else f"{c}@{o}" for c, _, o in sorted(at)))
        for (producer, value), at in seen_at.items() if len(at) > 1
    )

    # the losses log: acked messages never read, the positions their acks named, and what
    # the read found at those positions
    read_at: dict = defaultdict(set)
    for r in rows:
        if r["type"] == "recv" and r["offset"] is not None:
            read_at[r["offset"]].add(f"{'?' if r['producer'] is None else r['producer']}:"
                                     f"{'?' if r['value'] is None else r['value']}")
    lost = []
    for (p, val), m in msgs.items():
        if m["sent"] and m["ack"] and m["recv"] == 0:
            acks = [r for r in rows if r["type"] == "ack" and r["producer"] == p and r["value"] == val]
            at = sorted({r["offset"] for r in acks if r["offset"] is not None})
            there = sorted(set().union(*(read_at[o] for o in at)))
            lost.append((p, val, " ".join(at), min(r["t_ns"] for r in acks), " ".join(there)))
    v["_lost"] = sorted(lost)
    v["acked_missing_overwritten"] = sum(1 for x in lost if x[4])

    ends = [r["detail"] for r in rows if r["type"] == "read_end"]
    v["read_complete"] = None if not ends else all(e == "complete" or e.startswith("complete:") for e in ends)
    recv_rows = [r for r in rows if r["type"] == "recv"]
    v["recv_rows"] = len(recv_rows)

    ack_times = [r["t_ns"] for r in rows if r["type"] == "ack"]
    ack_gaps = _gaps(ack_times)
    v["max_ack_gap_ms"] = max((b - a for a, b in ack_gaps), default=None)
    if v["max_ack_gap_ms"] is not None:
        v["max_ack_gap_ms"] /= 1e6

    t_end = max(r["t_ns"] for r in rows)
    windows = _windows([r for r in rows if r["type"] in ("fault", "heal")], t_end)
    outages, ack_gap_ms = [], []
    for tf, te in windows:
        best = None
        for a, b in ack_gaps:
            if b > tf and a <= te:
                eff = b - max(a, tf)
                if best is None or eff > best[0]:  # gaps are in time order: ties keep the earliest
                    best = (eff, b)
        last_ack = max(ack_times) if ack_times else None
        producer_times = [r["t_ns"] for r in rows if r["type"] in ("send", "ack", "nack", "unknown")]
        write_end = max(producer_times) if producer_times else None
        open_len = None
        if write_end is not None and (last_ack is None or last_ack <= te):
            open_len = write_end - max(last_ack if last_ack is not None else tf, tf)
        if best is None or (open_len is not None and open_len > best[0]):
            outages.append(None)
            ack_gap_ms.append(None)
        else:
            outages.append((best[1] - tf) / 1e6)
            ack_gap_ms.append(best[0] / 1e6)
    v["fault_outages_ms"] = outages
    v["fault_ack_gaps_ms"] = ack_gap_ms
    v["_windows"] = windows
    all_recv = [r for r in recv_rows if not r.get("_taken")] + observed
    span: dict = {}
    for r in all_recv:
        lo, hi = span.get(r["client"], (r["t_ns"], r["t_ns"]))
        span[r["client"]] = (min(lo, r["t_ns"]), max(hi, r["t_ns"]))
    live = {c for c, (lo, hi) in span.items() if any(lo <= te and hi >= tf for tf, te in windows)}
    rg = _gaps([r["t_ns"] for r in all_recv if r["client"] in live])
    v["max_recv_gap_ms"] = max((b - a for a, b in rg), default=None)
    if v["max_recv_gap_ms"] is not None:
        v["max_recv_gap_ms"] /= 1e6
    # per window, the live consumers' longest delivery gap overlapping it, from the fault on
    v["fault_recv_gaps_ms"] = [
        max((b - max(a, tf) for a, b in rg if b > tf and a <= te), default=None) for tf, te in windows]
    v["fault_recv_gaps_ms"] = [None if g is None else g / 1e6 for g in v["fault_recv_gaps_ms"]]

    v["ack_latency_ms"] = _lat([(m["t_ack"] - m["t_lat0"]) / 1e6 for m in sent if m["ack"]])
    lags = [r["t_ns"] - r["intended_ns"] for r in rows if r["type"] == "send" and r.get("intended_ns") is not None]
    v["late_sends"] = sum(1 for x in lags if x > 100_000_000) if lags else None
    v["max_send_lag_ms"] = max(lags) / 1e6 if lags else None
    sends = [r["t_ns"] for r in rows if r["type"] == "send"]
    live_reader = bool(all_recv) and bool(sends) and min(r["t_ns"] for r in all_recv) < max(sends)
    first_recv = {}
    for r in all_recv:
        k = (r["producer"], r["value"])
        first_recv[k] = min(first_recv.get(k, r["t_ns"]), r["t_ns"])
    carried = [r for r in rows if r["type"] == "ack" and r.get("send_ns") is not None]
    if carried and not live_reader:
        # format 1.4: the producer wrote each first ack's start on it; nothing is paired
        v["ack_latency_ms"] = _lat([(r["t_ns"] - r["send_ns"]) / 1e6 for r in carried])
    v["e2e_latency_ms"] = _lat([(first_recv[k] - m["t_lat0"]) / 1e6 for k, m in msgs.items()
                                if m["sent"] and k in first_recv]) if live_reader else None

    rx_gaps = []
    if windows:
        read = [r for r in recv_rows if not r.get("_taken")]
        reading = {r["client"] for r in read if r["t_ns"] <= windows[0][1]}
        rx_gaps = _gaps([r["t_ns"] for r in read if r["client"] in reading])
    v.update(_session(run, position, rows, windows, rx_gaps, outages))

    v["_read_decides"] = not (v["read_complete"] is False or (v["read_complete"] is None and not recv_rows))
    return v


def _txns(checked: list[dict]) -> dict:
    """The transactions' figures (format 1.7): a transaction is committed if one of its
    outcome rows is an ack, else aborted if one is a nack, else unknown."""
    out = dict.fromkeys(("txns", "txns_committed", "txns_aborted", "txns_unknown", "aborted_reads", "torn_txns",
                         "offset_conflicts", "nonmonotonic_reads", "interleaved_txns"), 0)
    kinds: dict[tuple, set] = {}
    members: dict[tuple, set] = {}
    for r in checked:
        if r.get("txn") is not None and r["type"] in ("ack", "nack", "unknown"):
            t = (r["producer"], r["txn"])
            kinds.setdefault(t, set()).add(r["type"])
            members.setdefault(t, set()).add((r["producer"], r["value"]))
    if not kinds:
        return out
    read = {(r["producer"], r["value"]) for r in checked if r["type"] == "recv" and r["value"] is not None}
    for t, ks in kinds.items():
        got = len(members[t] & read)
        out["txns"] += 1
        if "ack" in ks:
            out["txns_committed"] += 1
            out["torn_txns"] += int(0 < got < len(members[t]))
        elif "nack" in ks:
            out["txns_aborted"] += 1
            out["aborted_reads"] += got
        else:
            out["txns_unknown"] += 1
    at: dict[str, set] = {}
    for r in checked:
        if r["offset"] is not None and r["type"] in ("ack", "nack", "recv"):
            at.setdefault(r["offset"], set()).add((r["producer"], r["value"]))
    out["offset_conflicts"] = sum(len(x) > 1 for x in at.values())
    last: dict[tuple, int] = {}
    for r in sorted((r for r in checked if r["type"] == "recv" and r["offset"] is not None), key=lambda r: r["seq"]):
        p, _, o = r["offset"].partition(":")
        if p.isdigit() and o.isdigit():
            key = (r["client"], int(p))
            out["nonmonotonic_reads"] += int(key in last and int(o) <= last[key])
            last[key] = int(o)
    txn_of: dict[tuple, int] = {}
    for (_, t), ms in members.items():
        for m in ms:
            txn_of[m] = max(t, txn_of.get(m, t))
    highest: dict[tuple, int] = {}  # the highest value read so far, its transaction the latest
    for r in sorted((r for r in checked if r["type"] == "recv" and r["value"] is not None), key=lambda r: r["seq"]):
        off = r["offset"] or ""
        p, _, o = off.partition(":")
        key = (r["client"], r["producer"], p if p.isdigit() and o.isdigit() else "")
        hi = highest.get(key)
        if hi is not None and r["value"] < hi and (r["producer"], r["value"]) in txn_of \
                and (r["producer"], hi) in txn_of:
            out["interleaved_txns"] += int(txn_of[(r["producer"], r["value"])] < txn_of[(r["producer"], hi)])
        highest[key] = max(r["value"], hi if hi is not None else r["value"])
    return out


def _eos(checked: list[dict], output_rows: list[dict], outputs: set) -> dict:
    """Exactly once: the output of a consume-transform-produce group as its end read found it,
    against the producers' outcomes (ack > unknown > nack, as the outcome of a message)."""
    out = {"eos_outputs": len(outputs), "eos_recv_rows": 0, "eos_duplicates": 0, "eos_missing": 0,
           "eos_nacked": 0, "eos_read_complete": None}
    if not outputs:
        return out
    ends = {r["client"]: r["detail"] for r in output_rows if r["type"] == "read_end"}
    out["eos_read_complete"] = all(c in ends and (ends[c] == "complete" or ends[c].startswith("complete:"))
                                   for c in outputs)
    got: dict[tuple, int] = {}
    for r in output_rows:
        if r["type"] == "recv" and r["value"] is not None:
            got[(r["producer"], r["value"])] = got.get((r["producer"], r["value"]), 0) + 1
    told: dict[tuple, set] = {}
    for r in checked:
        if r["type"] in ("ack", "nack", "unknown"):
            told.setdefault((r["producer"], r["value"]), set()).add(r["type"])
    out["eos_recv_rows"] = sum(got.values())
    stored: dict[tuple, set] = {}
    for r in checked:
        if r["type"] == "recv" and r["value"] is not None and r["offset"] is not None:
            stored.setdefault((r["producer"], r["value"]), set()).add(r["offset"])
    out["eos_duplicates"] = sum(k > max(1, len(stored.get(m, ()))) for m, k in got.items())
    out["eos_missing"] = sum(1 for m, ks in told.items() if "ack" in ks and m not in got)
    out["eos_nacked"] = sum(1 for m in got if told.get(m) == {"nack"})
    return out


def _result(v: dict) -> str:
    decides, groups_done = v["_read_decides"], v["group_read_complete"] is True
    if v["received_after_nack"] > 0 or (decides and v["acked_missing"] > 0):
        return "fail"
    if v["eos_outputs"] and (v["eos_duplicates"] or v["eos_nacked"] or (
            v["eos_read_complete"] and groups_done and decides and v["eos_missing"])):
        return "fail"
    if v["txns"] and (v["aborted_reads"] or v["offset_conflicts"] or v["nonmonotonic_reads"] or v["interleaved_txns"]
                      or (decides and v["torn_txns"])):
        return "fail"
    if v["groups"] and decides and groups_done and v["group_skips"] > 0:
        return "fail"  # a stored message a group never processed
    if v["replica_reads"] and (v["replicas_diverged"] or (v["replica_reads_complete"] and v["acked_on_no_replica"])):
        return "fail"
    if v["replica_reads"] and not v["replica_reads_complete"]:
        return "unknown"
    if not decides or (v["groups"] and not groups_done) or (v["eos_outputs"] and not v["eos_read_complete"]):
        return "unknown"
    return "pass"


ASSIGNED = object()  # a member's position right after an assignment: any delivery is past it


def _groups(checked: list[dict], members: list[dict], group_of: dict, windows: list) -> dict:
    """The consumer-group figures (format 1.6), per group and summed over the run's groups."""
    sent = {(r["producer"], r["value"]) for r in checked if r["type"] == "send"}
    stored = {(r["producer"], r["value"]) for r in checked if r["type"] == "recv"} & sent
    per = {}
    for g in sorted(set(group_of.values())):
        mine = [r for r in members if group_of[r["client"]] == g]
        per[g] = _group(mine, stored)
        per[g]["outages_ms"] = _group_outages(mine, windows)
    keys = ("group_recv_rows", "group_skips", "group_duplicates", "group_dup_stored", "group_dup_handover",
            "group_dup_same", "group_nonmonotonic", "group_commits", "group_commit_failures", "group_commit_backwards")
    out = {k: sum(x[k] for x in per.values()) for k in keys}
    done = [x["read_complete"] for x in per.values()]
    out["groups"] = len(per)
    out["group_read_complete"] = None if not per or None in done else all(done)
    out["consumer_groups"] = per
    out["group_outage_ms"] = [max((x["outages_ms"][j] for x in per.values() if x["outages_ms"][j] is not None),
                                  default=None) for j in range(len(windows))] if per else []
    return out


def _group_outages(rows: list[dict], windows: list) -> list:
    """Per fault window: the longest interval one of the group's partitions went without a
    delivery, overlapping the window, from the fault on (ms; None: no such interval)."""
    times = defaultdict(list)
    for r in rows:
        if r["type"] == "recv" and r.get("partition") is not None:
            times[r["partition"]].append(r["t_ns"])
    gaps = [g for ts in times.values() for g in _gaps(ts)]
    out = []
    for tf, te in windows:
        best = max((b - max(a, tf) for a, b in gaps if b > tf and a <= te), default=None)
        out.append(None if best is None else best / 1e6)
    return out


def _group(rows: list[dict], stored: set) -> dict:
    recv = [r for r in rows if r["type"] == "recv"]
    got = defaultdict(list)  # (producer, value) -> [(client, offset)]
    for r in recv:
        if r["producer"] is not None and r["value"] is not None:
            got[(r["producer"], r["value"])].append((r["client"], r["offset"]))
    x = {"group_recv_rows": len(recv), "group_skips": len(stored - set(got)), "group_duplicates": 0,
         "group_dup_stored": 0, "group_dup_handover": 0, "group_dup_same": 0}
    for at in got.values():
        x["group_duplicates"] += len(at) - 1
        offsets = {o for _, o in at if o is not None}
        x["group_dup_stored"] += max(0, len(offsets) - 1)
        for o in offsets:
            here = [c for c, oo in at if oo == o]
            x["group_dup_handover"] += len(set(here)) - 1
            x["group_dup_same"] += len(here) - len(set(here))
    # nonmonotonic: per (member, partition) in the member's order, a delivery not past the
    # previous one, unless an assignment of that partition came between
    x["group_nonmonotonic"] = 0
    streams = defaultdict(list)
    for r in rows:
        if r.get("partition") is not None and (r["type"] == "assign"
                                           or (r["type"] == "recv" and r.get("position") is not None)):
            streams[(r["client"], r.get("partition"))].append(r)
    for rs in streams.values():
        prev = None
        for r in sorted(rs, key=lambda r: r["seq"]):
            if r["type"] == "assign":
                prev = ASSIGNED
                continue
            if prev is not None and prev is not ASSIGNED and r.get("position") <= prev:
                x["group_nonmonotonic"] += 1
            prev = r.get("position")
    commits = sorted((r for r in rows if r["type"] == "commit"), key=lambda r: (r["t_ns"], r["client"], r["seq"]))
    x["group_commits"] = len(commits)
    placed = [r for r in commits if r.get("position") is not None and r.get("partition") is not None]
    ok = [r for r in placed if r["detail"] == "ok"]  # a position, and everything before it
    x["group_commit_failures"] = len(commits) - len(ok) - len([r for r in commits if r["detail"] == "acked"])
    x["group_commit_backwards"] = 0
    best: dict = {}
    for r in ok:
        if r.get("partition") in best and r.get("position") < best[r.get("partition")]:
            x["group_commit_backwards"] += 1
        best[r.get("partition")] = max(best.get(r.get("partition"), r.get("position")), r.get("position"))
    ends = [r["detail"] for r in rows if r["type"] == "read_end" and r["detail"] != "left"]
    x["read_complete"] = None if not ends else all(e == "complete" or e.startswith("complete:") for e in ends)
    x["read_status"] = "; ".join(sorted(set(ends))) if ends else None
    return x
