// Cascade charts: small hand-written SVG charts (bars, stacked bars, lines, CDFs), no library.
"use strict";

const Charts = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const PALETTE = ["#2f6fde", "#e0752d", "#2a9d6f", "#b8457a", "#7a5cc7", "#8a7a12", "#1f9bb5", "#c23b3b"];
  const registry = new Map(); // element -> draw function, redrawn on resize

  // Times by magnitude: ns, µs, ms, s (input in milliseconds).
  function fmtMs(ms) {
    if (ms === null || ms === undefined || Number.isNaN(Number(ms))) return "-";
    const v = Number(ms);
    const a = Math.abs(v);
    if (a === 0) return "0";
    if (a < 1e-3) return trim(v * 1e6) + " ns";
    if (a < 1) return trim(v * 1e3) + " µs";
    if (a < 1000) return trim(v) + " ms";
    return trim(v / 1000) + " s";
  }
  const fmtNs = (ns) => (ns === null || ns === undefined ? "-" : fmtMs(Number(ns) / 1e6));
  function trim(v) {
    return v.toFixed(2).replace(/\.?0+$/, "");
  }
  function fmtNum(v, unit = "") {
    if (v === null || v === undefined || Number.isNaN(Number(v))) return "-";
    const a = Math.abs(v);
    let s;
    if (a >= 1e9) s = (v / 1e9).toFixed(2).replace(/\.?0+$/, "") + " G";
    else if (a >= 1e6) s = (v / 1e6).toFixed(2).replace(/\.?0+$/, "") + " M";
    else if (a >= 1e4) s = (v / 1e3).toFixed(1).replace(/\.?0+$/, "") + " k";
    else s = Number(v.toPrecision(4)).toString() + (unit ? " " : "");
    return (s + unit).trim();
  }

  function el(name, attrs = {}, text) {
    const node = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function svg(width, height, label) {
    const s = el("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": label, class: "chart-svg" });
    s.appendChild(el("title", {}, label));
    return s;
  }
  function niceTicks(lo, hi, n = 5) {
    if (!(hi > lo)) hi = lo + 1;
    const span = hi - lo;
    const step0 = Math.pow(10, Math.floor(Math.log10(span / n)));
    const err = (span / n) / step0;
    const step = step0 * (err >= 7.5 ? 10 : err >= 3.5 ? 5 : err >= 1.5 ? 2 : 1);
    const out = [];
    const end = Math.ceil(hi / step - 1e-9) * step;
    for (let t = Math.ceil(lo / step) * step; t <= end + step * 1e-9; t += step) out.push(Number(t.toPrecision(12)));
    return out;
  }
  // Every k-th tick so that labels stay at least minPx apart.
  function thin(ticks, span, minPx = 60) {
    if (ticks.length < 2) return ticks;
    const k = Math.max(1, Math.ceil(minPx / (span / (ticks.length - 1))));
    return ticks.filter((_, i) => i % k === 0);
  }
  function legend(host, names) {
    const div = document.createElement("div");
    div.className = "legend";
    names.forEach((n, i) => {
      const item = document.createElement("span");
      item.innerHTML = `<i style="background:${PALETTE[i % PALETTE.length]}"></i>`;
      item.appendChild(document.createTextNode(n));
      div.appendChild(item);
    });
    host.appendChild(div);
  }
  function mount(host, draw) {
    registry.set(host, draw);
    draw();
  }
  function width(host) { return Math.max(260, Math.floor(host.clientWidth || host.parentElement?.clientWidth || 600)); }

  // Horizontal grouped bars: one group per category, one bar per series.
  // opts: {categories, series: [{name, values}], fmt, label, notes: [text per category], colors}
  function bars(host, opts) {
    mount(host, () => {
      host.innerHTML = "";
      const fmt = opts.fmt || fmtMs;
      const W = width(host);
      const labelW = Math.min(150, Math.floor(W * 0.32));
      const noteW = opts.notes ? Math.min(120, Math.floor(W * 0.22)) : 0;
      const nS = opts.series.length;
      const barH = 16, gap = 4, groupGap = 12;
      const groupH = nS * barH + (nS - 1) * gap;
      const top = 6, bottom = 24;
      const H = top + bottom + opts.categories.length * (groupH + groupGap);
      const plotW = W - labelW - noteW - 60;
      const max = Math.max(1e-12, ...opts.series.flatMap((s) => s.values.filter((v) => v !== null && v !== undefined && !Number.isNaN(v))));
      const ticks = niceTicks(0, max, Math.max(2, Math.floor(plotW / 90)));
      const xMax = ticks[ticks.length - 1] || max;
      const x = (v) => labelW + (v / xMax) * plotW;
      const s = svg(W, H, opts.label);
      const gAxis = el("g", { class: "axis" });
      thin(ticks, plotW).forEach((t) => {
        gAxis.appendChild(el("line", { x1: x(t), x2: x(t), y1: top, y2: H - bottom, class: "grid" }));
        gAxis.appendChild(el("text", { x: x(t), y: H - 8, "text-anchor": "middle" }, fmt(t)));
      });
      s.appendChild(gAxis);
      opts.categories.forEach((cat, ci) => {
        const y0 = top + ci * (groupH + groupGap);
        s.appendChild(el("text", { x: labelW - 6, y: y0 + groupH / 2 + 4, "text-anchor": "end", class: "cat" }, cat));
        opts.series.forEach((ser, si) => {
          const v = ser.values[ci];
          const y = y0 + si * (barH + gap);
          const color = (ser.colors && ser.colors[ci]) || PALETTE[si % PALETTE.length];
          if (v === null || v === undefined || Number.isNaN(v)) {
            s.appendChild(el("text", { x: labelW + 4, y: y + barH - 4, class: "missing" }, `no ${ser.name.toLowerCase()}`));
            return;
          }
          const r = el("rect", { x: labelW, y, width: Math.max(1, x(v) - labelW), height: barH, fill: color, rx: 2, class: "mark", "data-series": ser.name, "data-value": v });
          r.appendChild(el("title", {}, `${cat} · ${ser.name}: ${fmt(v)}`));
          s.appendChild(r);
          s.appendChild(el("text", { x: x(v) + 4, y: y + barH - 4, class: "val" }, fmt(v)));
        });
        if (opts.notes && opts.notes[ci]) {
          s.appendChild(el("text", { x: W - noteW, y: y0 + groupH / 2 + 4, class: "note " + (opts.noteClass ? opts.noteClass[ci] || "" : "") }, opts.notes[ci]));
        }
      });
      host.appendChild(s);
      if (nS > 1 || opts.legend) legend(host, opts.series.map((x) => x.name));
    });
  }

  // Horizontal stacked bars: opts {categories, parts: [{name, values}], fmt, label}
  function stacked(host, opts) {
    mount(host, () => {
      host.innerHTML = "";
      const fmt = opts.fmt || fmtMs;
      const W = width(host);
      const labelW = Math.min(150, Math.floor(W * 0.32));
      const barH = 20, gapY = 10, top = 6, bottom = 24;
      const H = top + bottom + opts.categories.length * (barH + gapY);
      const plotW = W - labelW - 70;
      const totals = opts.categories.map((_, ci) => opts.parts.reduce((a, p) => a + Math.max(0, p.values[ci] || 0), 0));
      const max = Math.max(1e-12, ...totals);
      const ticks = niceTicks(0, max, Math.max(2, Math.floor(plotW / 90)));
      const xMax = ticks[ticks.length - 1] || max;
      const sx = (v) => (v / xMax) * plotW;
      const s = svg(W, H, opts.label);
      thin(ticks, plotW).forEach((t) => {
        s.appendChild(el("line", { x1: labelW + sx(t), x2: labelW + sx(t), y1: top, y2: H - bottom, class: "grid" }));
        s.appendChild(el("text", { x: labelW + sx(t), y: H - 8, "text-anchor": "middle", class: "axis" }, fmt(t)));
      });
      opts.categories.forEach((cat, ci) => {
        const y = top + ci * (barH + gapY);
        s.appendChild(el("text", { x: labelW - 6, y: y + barH - 5, "text-anchor": "end", class: "cat" }, cat));
        let acc = 0;
        opts.parts.forEach((p, pi) => {
          const v = Math.max(0, p.values[ci] || 0);
          const r = el("rect", { x: labelW + sx(acc), y, width: sx(v), height: barH, fill: PALETTE[pi % PALETTE.length], class: "mark", "data-series": p.name, "data-value": v });
          const pct = totals[ci] ? ` (${(100 * v / totals[ci]).toFixed(0)}%)` : "";
          r.appendChild(el("title", {}, `${cat} · ${p.name}: ${fmt(v)}${pct}`));
          s.appendChild(r);
          acc += v;
        });
        s.appendChild(el("text", { x: labelW + sx(acc) + 4, y: y + barH - 5, class: "val" }, fmt(totals[ci])));
      });
      host.appendChild(s);
      legend(host, opts.parts.map((p) => p.name));
    });
  }

  // Lines: opts {series: [{name, points: [[x, y], ...], step?, dashed?}], xFmt, yFmt, xLabel, yLabel,
  // label, vlines: [{x, text}], yMin0, hlines: [{y, text}]}
  function lines(host, opts) {
    mount(host, () => {
      host.innerHTML = "";
      const W = width(host);
      const H = opts.height || Math.max(180, Math.min(280, Math.round(W * 0.45)));
      const left = 62, right = 14, top = 10, bottom = 38;
      const pts = opts.series.flatMap((s) => s.points).filter((p) => Number.isFinite(p[0]) && Number.isFinite(p[1]));
      const xfmt = opts.xFmt || ((v) => fmtNum(v));
      const yfmt = opts.yFmt || fmtMs;
      const s = svg(W, H, opts.label);
      if (!pts.length) {
        s.appendChild(el("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "missing" }, "no data"));
        host.appendChild(s);
        return;
      }
      let x0 = Math.min(...pts.map((p) => p[0])), x1 = Math.max(...pts.map((p) => p[0]));
      (opts.vlines || []).forEach((v) => { x0 = Math.min(x0, v.x); x1 = Math.max(x1, v.x); });
      let y0 = opts.yMin0 === false ? Math.min(...pts.map((p) => p[1])) : 0, y1 = Math.max(...pts.map((p) => p[1]));
      (opts.hlines || []).forEach((h) => { y1 = Math.max(y1, h.y); });
      if (x1 === x0) { x0 -= 1; x1 += 1; }
      if (y1 === y0) y1 = y0 + (Math.abs(y0) || 1);
      const yt = opts.yTicks || niceTicks(y0, y1, 4);
      const xt = opts.xTicks || niceTicks(x0, x1, Math.max(2, Math.floor((W - left) / 90)));
      y1 = Math.max(y1, yt[yt.length - 1]);
      const X = (v) => left + ((v - x0) / (x1 - x0)) * (W - left - right);
      const Y = (v) => top + (1 - (v - y0) / (y1 - y0)) * (H - top - bottom);
      yt.forEach((t) => {
        s.appendChild(el("line", { x1: left, x2: W - right, y1: Y(t), y2: Y(t), class: "grid" }));
        s.appendChild(el("text", { x: left - 5, y: Y(t) + 4, "text-anchor": "end", class: "axis" }, yfmt(t)));
      });
      thin(xt.filter((t) => t >= x0 && t <= x1), W - left - right).forEach((t) => {
        s.appendChild(el("text", { x: X(t), y: H - bottom + 15, "text-anchor": "middle", class: "axis" }, xfmt(t)));
      });
      s.appendChild(el("line", { x1: left, x2: W - right, y1: H - bottom, y2: H - bottom, class: "axisline" }));
      if (opts.xLabel) s.appendChild(el("text", { x: (left + W - right) / 2, y: H - 4, "text-anchor": "middle", class: "axis label" }, opts.xLabel));
      (opts.hlines || []).forEach((h) => {
        s.appendChild(el("line", { x1: left, x2: W - right, y1: Y(h.y), y2: Y(h.y), class: "marker" }));
        s.appendChild(el("text", { x: W - right - 4, y: Y(h.y) - 4, "text-anchor": "end", class: "marker-text" }, h.text));
      });
      (opts.vlines || []).forEach((v) => {
        const line = el("line", { x1: X(v.x), x2: X(v.x), y1: top, y2: H - bottom, class: "marker capacity" });
        line.appendChild(el("title", {}, v.text));
        s.appendChild(line);
        const anchor = X(v.x) > W * 0.6 ? "end" : "start";
        s.appendChild(el("text", { x: X(v.x) + (anchor === "end" ? -4 : 4), y: top + 12, "text-anchor": anchor, class: "marker-text" }, v.text));
      });
      opts.series.forEach((ser, si) => {
        const color = PALETTE[si % PALETTE.length];
        const p = ser.points.filter((q) => Number.isFinite(q[0]) && Number.isFinite(q[1]));
        if (!p.length) return;
        let d = "";
        p.forEach((q, i) => {
          if (i === 0) d += `M${X(q[0]).toFixed(1)},${Y(q[1]).toFixed(1)}`;
          else if (ser.step) d += `H${X(q[0]).toFixed(1)}V${Y(q[1]).toFixed(1)}`;
          else d += `L${X(q[0]).toFixed(1)},${Y(q[1]).toFixed(1)}`;
        });
        const path = el("path", { d, fill: "none", stroke: color, "stroke-width": 2, class: "line", "data-series": ser.name, "stroke-dasharray": ser.dashed ? "5 4" : null });
        path.appendChild(el("title", {}, ser.name));
        s.appendChild(path);
        if (ser.dots || p.length <= 40) {
          p.forEach((q) => {
            const c = el("circle", { cx: X(q[0]), cy: Y(q[1]), r: ser.step ? 0 : 3, fill: color });
            c.appendChild(el("title", {}, `${ser.name}: ${xfmt(q[0])} → ${yfmt(q[1])}`));
            s.appendChild(c);
          });
        }
      });
      host.appendChild(s);
      if (opts.series.length > 1 || opts.legend) legend(host, opts.series.map((x) => x.name));
    });
  }

  // Empirical CDF of values (ms): opts {series: [{name, values}], label, xLabel}
  function cdf(host, opts) {
    const series = opts.series.map((s) => {
      const v = s.values.filter((x) => Number.isFinite(x)).slice().sort((a, b) => a - b);
      const pts = v.map((x, i) => [x, (i + 1) / v.length]);
      if (pts.length) pts.unshift([v[0], 0]);
      return { name: s.name, points: s.quantiles ? s.quantiles : pts, step: !s.quantiles, dots: !!s.quantiles };
    });
    lines(host, { series, label: opts.label, xLabel: opts.xLabel || "latency", xFmt: fmtMs,
      yFmt: (p) => Math.round(p * 100) + "%", yTicks: [0, 0.25, 0.5, 0.75, 1], height: opts.height });
  }

  let resizeTimer = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => {
      for (const [host, draw] of registry) {
        if (!host.isConnected) registry.delete(host);
        else draw();
      }
    }, 150);
  });

  return { bars, stacked, lines, cdf, fmtMs, fmtNs, fmtNum, PALETTE };
})();
