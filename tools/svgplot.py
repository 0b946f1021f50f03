"""Line charts as plain SVG (no plotting library): labelled axes with units, ticks, a legend, and
points marked. Used by tools/bench_suite.py.

    svg = line_chart(title, xlabel, ylabel, series, xticks=[128, 256, 512, 1024], logx=True)
    series: [{"label": str, "points": [(x, y), ...], "color": "#rrggbb", "dash": bool}, ...]
    Missing points (y None) break the line.
"""
import math
from xml.sax.saxutils import escape

PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"]


def nice_ticks(lo, hi, n=6):
    """Round tick values covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / max(1, n - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    t = math.floor(lo / step) * step
    out = []
    while t <= hi + step * 1e-9:
        out.append(round(t, 10))
        t += step
    return out


def log_ticks(lo, hi):
    """1-2-5 ticks for a log axis covering [lo, hi]."""
    out = []
    e = math.floor(math.log10(lo))
    while 10 ** e <= hi * 10:
        for m in (1, 2, 5):
            v = m * 10 ** e
            if lo / 1.0001 <= v <= hi * 1.0001:
                out.append(v)
        e += 1
    if len(out) < 2:
        out = [lo, hi]
    return out


def fmt(v):
    if v == 0:
        return "0"
    if abs(v) >= 1000 or abs(v) < 0.01:
        return f"{v:g}"
    return f"{v:.3g}" if abs(v) < 10 else f"{v:.4g}"


def line_chart(title, xlabel, ylabel, series, xticks=None, logx=False, logy=False, width=760, height=440, ymin=None):
    pts = [(x, y) for s in series for x, y in s["points"] if y is not None]
    if not pts:
        raise ValueError(f"chart '{title}': no points")
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    x0, x1 = min(xs + (xticks or [])), max(xs + (xticks or []))
    if logy:
        y0, y1 = min(ys) / 1.15, max(ys) * 1.15
        yt = log_ticks(y0, y1)
        y0, y1 = min(y0, yt[0]), max(y1, yt[-1])
    else:
        y0 = 0.0 if ymin is None else ymin
        y1 = max(ys) * 1.08
        yt = nice_ticks(y0, y1)
        y1 = max(y1, yt[-1])
    L, R, T, B = 78, 190, 40, 58  # margins: left (y labels), right (legend), top (title), bottom (x labels)
    pw, ph = width - L - R, height - T - B

    def X(x):
        if logx:
            return L + pw * (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0) or 1)
        return L + pw * (x - x0) / ((x1 - x0) or 1)

    def Y(y):
        if logy:
            return T + ph * (1 - (math.log(y) - math.log(y0)) / (math.log(y1) - math.log(y0)))
        return T + ph * (1 - (y - y0) / ((y1 - y0) or 1))

    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
         f'font-family="sans-serif" font-size="12">',
         f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>',
         f'<text x="{L}" y="22" font-size="15">{escape(title)}</text>']
    for v in yt:
        y = Y(v)
        o.append(f'<line x1="{L}" y1="{y:.1f}" x2="{L + pw}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        o.append(f'<text x="{L - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt(v)}</text>')
    for v in (xticks or nice_ticks(x0, x1)):
        x = X(v)
        o.append(f'<line x1="{x:.1f}" y1="{T}" x2="{x:.1f}" y2="{T + ph}" stroke="#eeeeee"/>')
        o.append(f'<text x="{x:.1f}" y="{T + ph + 18}" text-anchor="middle">{fmt(v)}</text>')
    o.append(f'<rect x="{L}" y="{T}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    o.append(f'<text x="{L + pw / 2:.1f}" y="{height - 14}" text-anchor="middle">{escape(xlabel)}</text>')
    o.append(f'<text transform="translate(18,{T + ph / 2:.1f}) rotate(-90)" text-anchor="middle">{escape(ylabel)}</text>')
    for i, s in enumerate(series):
        color = s.get("color") or PALETTE[i % len(PALETTE)]
        dash = ' stroke-dasharray="6,4"' if s.get("dash") else ""
        seg = []
        segs = []
        for x, y in sorted(s["points"], key=lambda p: p[0]):
            if y is None:
                if seg:
                    segs.append(seg)
                seg = []
            else:
                seg.append((X(x), Y(y)))
        if seg:
            segs.append(seg)
        for sg in segs:
            if len(sg) > 1:
                o.append(f'<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="' +
                         " ".join(f"{x:.1f},{y:.1f}" for x, y in sg) + '"/>')
            for x, y in sg:
                o.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.2" fill="{color}"/>')
        ly = T + 10 + 18 * i
        o.append(f'<line x1="{L + pw + 12}" y1="{ly}" x2="{L + pw + 38}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/>')
        o.append(f'<text x="{L + pw + 44}" y="{ly + 4}">{escape(s["label"])}</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"
