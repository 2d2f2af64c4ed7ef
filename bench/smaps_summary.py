#!/usr/bin/env python3
"""Sums a /proc/<pid>/smaps copy per mapped file, for reading where RSS goes.

    bench/smaps_summary.py idle.smaps [end.smaps]

Prints, per file (anonymous mappings grouped as [anon], [heap], [stack]...),
the resident KiB split by permission (code r-x, read-only r--, writable rw-,
of which anonymous: relocated or written pages), the PSS, and the total; with
two files, the second file's totals and the change. plugin-prepare-bench
--smaps-dir writes such copies (bench/README.md).
"""
import collections
import os
import signal
import sys


def parse(path):
    """{name: {"rss","pss","anon","r-x","r--","rw-",...}} in KiB."""
    out = collections.defaultdict(collections.Counter)
    name = perms = None
    with open(path) as f:
        for line in f:
            fields = line.split()
            if not fields:
                continue
            if "-" in fields[0] and not fields[0].endswith(":"):
                # Mapping header: range perms offset dev inode [path]
                perms = fields[1][:3]
                name = os.path.basename(fields[5]) if len(fields) > 5 else "[anon]"
                if len(fields) > 5 and fields[5].startswith("["):
                    name = fields[5]
                if name.startswith("[stack"):
                    name = "[stack]"
                continue
            key = fields[0].rstrip(":")
            if key == "Rss":
                kib = int(fields[1])
                out[name]["rss"] += kib
                out[name][perms] += kib
            elif key == "Pss":
                out[name]["pss"] += int(fields[1])
            elif key == "Anonymous":
                out[name]["anon"] += int(fields[1])
    return out


def main(argv):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # | head
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    first = parse(argv[1])
    second = parse(argv[2]) if len(argv) == 3 else None
    names = set(first) | set(second or {})
    rows = sorted(names, key=lambda n: -(second or first).get(n, {}).get("rss", 0))
    head = f"{'mapping':44} {'r-x':>6} {'r--':>6} {'rw-':>6} {'anon':>6} {'Rss':>7} {'Pss':>7}"
    if second is not None:
        head += f" {'Rss(2)':>7} {'change':>7}"
    print(head + "   (KiB)")
    totals = collections.Counter()
    totals2 = collections.Counter()
    for n in rows:
        a = first.get(n, collections.Counter())
        line = f"{n[:44]:44} {a['r-x']:6} {a['r--']:6} {a['rw-']:6} {a['anon']:6} {a['rss']:7} {a['pss']:7}"
        totals.update(a)
        if second is not None:
            b = second.get(n, collections.Counter())
            totals2.update(b)
            line += f" {b['rss']:7} {b['rss'] - a['rss']:+7}"
        if a["rss"] or (second is not None and second.get(n, {}).get("rss", 0)):
            print(line)
    line = (f"{'total':44} {totals['r-x']:6} {totals['r--']:6} {totals['rw-']:6} {totals['anon']:6} "
            f"{totals['rss']:7} {totals['pss']:7}")
    if second is not None:
        line += f" {totals2['rss']:7} {totals2['rss'] - totals['rss']:+7}"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
