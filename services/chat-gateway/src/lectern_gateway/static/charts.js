// A small SVG charting module for the quality dashboard: stacked bars and lines, built
// with DOM calls only (no HTML parsing of any text), each bar optionally a link. No build step.

const SVG = "http://www.w3.org/2000/svg";

function node(tag, attrs = {}, text = null) {
  const element = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) element.setAttribute(key, String(value));
  if (text !== null) element.textContent = text;
  return element;
}

function frame(width, height, label) {
  const svg = node("svg", {
    viewBox: `0 0 ${width} ${height}`, width, height, role: "img", class: "chart",
    "aria-label": label,
  });
  svg.append(node("title", {}, label));
  return svg;
}

// Stacked bars: one bar per category, one segment per series.
// data: [{label, values: {series: number}, href?}], series: [{key, name, color}]
export function stackedBars(data, series, { label, width = 640, height = 220, onPick } = {}) {
  const pad = { left: 36, right: 8, top: 12, bottom: 36 };
  const svg = frame(width, height, label);
  const max = Math.max(1, ...data.map((d) => series.reduce((s, k) => s + (d.values[k.key] || 0), 0)));
  const inner = width - pad.left - pad.right;
  const step = data.length ? inner / data.length : inner;
  const barWidth = Math.max(4, step * 0.7);
  const scale = (v) => ((height - pad.top - pad.bottom) * v) / max;
  svg.append(node("line", { x1: pad.left, y1: height - pad.bottom, x2: width - pad.right,
    y2: height - pad.bottom, class: "axis" }));
  svg.append(node("text", { x: 4, y: pad.top + 8, class: "tick" }, String(max)));
  data.forEach((d, i) => {
    const x = pad.left + i * step + (step - barWidth) / 2;
    let y = height - pad.bottom;
    const group = node("g", { class: "bar", "data-label": d.label });
    for (const s of series) {
      const value = d.values[s.key] || 0;
      if (!value) continue;
      const h = scale(value);
      y -= h;
      const rect = node("rect", { x, y, width: barWidth, height: h, fill: s.color, class: `seg-${s.key}` });
      rect.append(node("title", {}, `${d.label} · ${s.name}: ${value}`));
      group.append(rect);
    }
    if (onPick) {
      group.setAttribute("tabindex", "0");
      group.setAttribute("role", "link");
      group.addEventListener("click", () => onPick(d));
      group.addEventListener("keydown", (e) => { if (e.key === "Enter") onPick(d); });
    }
    svg.append(group);
    svg.append(node("text", { x: x + barWidth / 2, y: height - pad.bottom + 14, class: "tick",
      "text-anchor": "middle" }, d.label));
  });
  return svg;
}

// Lines: one polyline per series over the same categories (null values skipped).
// data: [{label, values: {series: number|null}}]
export function lines(data, series, { label, width = 640, height = 180, unit = "" } = {}) {
  const pad = { left: 48, right: 8, top: 12, bottom: 30 };
  const svg = frame(width, height, label);
  const all = data.flatMap((d) => series.map((s) => d.values[s.key])).filter((v) => v != null);
  const max = Math.max(1, ...all);
  const inner = width - pad.left - pad.right;
  const step = data.length > 1 ? inner / (data.length - 1) : 0;
  const y = (v) => height - pad.bottom - ((height - pad.top - pad.bottom) * v) / max;
  svg.append(node("text", { x: 4, y: pad.top + 8, class: "tick" }, `${Math.round(max)}${unit}`));
  for (const s of series) {
    const points = data
      .map((d, i) => (d.values[s.key] == null ? null : `${pad.left + i * step},${y(d.values[s.key])}`))
      .filter(Boolean);
    if (!points.length) continue;
    const line = node("polyline", { points: points.join(" "), fill: "none", stroke: s.color,
      "stroke-width": 2, class: `line-${s.key}` });
    line.append(node("title", {}, s.name));
    svg.append(line);
  }
  data.forEach((d, i) => {
    svg.append(node("text", { x: pad.left + i * step, y: height - 10, class: "tick",
      "text-anchor": "middle" }, d.label));
  });
  return svg;
}
