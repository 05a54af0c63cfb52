#!/usr/bin/python3
"""
test/chaos/plot.py -- the timeline of a chaos run as a PNG (gnuplot).

Every token granted, against the time it was asked for, coloured by the
node that granted it; acknowledged commits that were lost, and writes the
fence rejected, on top; failovers as vertical lines, faults as shaded
spans, mode changes as dashed lines.  Written next to the results as
timeline.png.  Run by hand: /usr/bin/python3 test/chaos/plot.py RESULTS_DIR
"""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import checker  # noqa: E402

COLOURS = {"n1": "#1f77b4", "n2": "#d62728", "n3": "#2ca02c"}
FAULT_COLOURS = {"kill9": "#ff9896", "stop_primary": "#ffbb78", "partition": "#c5b0d5",
                 "stop_worker": "#dbdb8d", "clock": "#9edae5", "switchover": "#c7c7c7"}


def plot(results, report=None):
    c = checker.Checker(results)
    c.build_phases()
    c.build_incarnations()
    t0 = c.t0
    grants = [e for e in c.log if e["ev"] == "grant"]
    if not grants:
        return None
    base = min(e["token"] for e in grants)
    scale = 1e6
    present = {row[0] for row in c.db["commits"]}
    lost = [e for e in c.log if e["ev"] == "ack" and e["attempt"] not in present]
    rejected = [e for e in c.log if e["ev"] == "rejected" and e.get("token") is not None]
    series_data = {}
    for node in ("n1", "n2", "n3"):
        series_data["granted by %s" % node] = [
            (e["sent"] - t0, e["token"]) for e in grants if c.node_name(e["node"]) == node]
    series_data["lost"] = [(e["recv"] - t0, e["token"]) for e in lost]
    series_data["rejected"] = [(e["mono"] - t0, e["token"]) for e in rejected]
    files = {}
    for name, points in series_data.items():
        if not points:
            continue
        path = os.path.join(results, "timeline-%s.dat" % name.split()[-1])
        with open(path, "w") as f:
            for x, token in points:
                f.write("%.3f %.6f\n" % (x, (token - base) / scale))
        files[name] = path
    xmax = max(e["sent"] for e in grants) - t0 + 5
    cmds = []
    for f in c.faults:
        if f["kind"] == "clock_end":
            continue
        end = f["end"]
        if f["kind"] == "clock":
            end = f["start"] + f.get("hold", 1)
        x1, x2 = f["start"] - t0, max(end - t0, f["start"] - t0 + 0.6)
        cmds.append('set object rect from %.2f, graph 0 to %.2f, graph 1 fc rgb "%s" '
                    'fs solid 0.35 noborder behind' % (x1, x2, FAULT_COLOURS.get(f["kind"], "#dddddd")))
        cmds.append('set label "%s" at %.2f, graph 0.98 rotate by 90 right font ",8"'
                    % (f["kind"] + (" " + f["target"] if f.get("target") else ""), x1 + 0.3))
    for (node, tl), inc in sorted(c.incarnations.items(), key=lambda kv: kv[1]["seen"]):
        if inc["first"]:
            continue
        x = inc["seen"] - t0
        cmds.append('set arrow from %.2f, graph 0 to %.2f, graph 1 nohead lc rgb "%s" lw 2'
                    % (x, x, COLOURS.get(node, "black")))
        cmds.append('set label "%s tl %s" at %.2f, graph 0.03 left rotate by 90 font ",8" tc rgb "%s"'
                    % (node, tl, x - 0.5, COLOURS.get(node, "black")))
    for p in c.r.phases[1:]:
        x = p["start"] - t0
        cmds.append('set arrow from %.2f, graph 0 to %.2f, graph 1 nohead dt 2 lc rgb "black"' % (x, x))
        cmds.append('set label "%s mode" at %.2f, graph 0.5 left font ",10"' % (p["mode"], x + 0.5))
    png = os.path.join(results, "timeline.png")
    modes = "+".join(p["mode"] for p in c.r.phases)
    title = "fencing under Patroni: %s mode, seed %s (tokens granted by node; failovers, faults)" % (
        modes, c.run.get("seed"))
    # drawn in this order: the many rejections under the grants they follow
    series = []
    if "rejected" in files:
        series.append("'%s' using 1:2 with points pt 2 ps 0.8 lc rgb '#ff7f0e' "
                      "title 'stale write rejected (FN001), at its token'" % files["rejected"])
    for node in ("n1", "n2", "n3"):
        name = "granted by %s" % node
        if name in files:
            series.append("'%s' using 1:2 with points pt 7 ps 0.5 lc rgb '%s' title 'token %s'"
                          % (files[name], COLOURS[node], name))
    if "lost" in files:
        series.append("'%s' using 1:2 with points pt 6 ps 1.6 lc rgb 'black' "
                      "title 'acknowledged, then lost (async)'" % files["lost"])
    script = "\n".join([
        "set terminal pngcairo size 1500,800 font ',10' noenhanced",
        "set output '%s'" % png,
        "set title \"%s\"" % title,
        "set xlabel 'seconds since the harness started'",
        "set ylabel 'token - first token (millions)'",
        "set key outside below horizontal box",
        "set bmargin 7",
        "set grid",
        "set xrange [0:%.1f]" % xmax,
    ] + cmds + ["plot " + ", \\\n     ".join(series), ""])
    with open(os.path.join(results, "timeline.gp"), "w") as f:
        f.write(script)
    subprocess.run(["gnuplot", os.path.join(results, "timeline.gp")], check=True,
                   capture_output=True)
    return png


if __name__ == "__main__":
    print(plot(sys.argv[1]))
