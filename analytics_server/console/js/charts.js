// Chart.js (vendored, analytics_server/console/vendor) behind a few chart shapes the pages need. Every chart
// made for a page is registered so the router can destroy it when the page changes.

const Chart = globalThis.Chart;
const live = new Set();

export const COLORS = {
  value: "#3b6fb6",
  interval: "#1c2b45",
  suppressed: "#c9cdd4",
  band: "rgba(59, 111, 182, 0.18)",
  mean: "#c0392b",
  meanBand: "rgba(192, 57, 43, 0.15)",
  series: ["#3b6fb6", "#d1852a", "#2e9961", "#8e5bb5", "#c0392b", "#5f6b7a"],
};

if (Chart) {
  Chart.defaults.animation = false;  // charts show the data at once (and screenshots are stable)
  Chart.defaults.font.family = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
  Chart.defaults.color = "#3a4350";
  Chart.defaults.maintainAspectRatio = false;
}

function make(canvas, config) {
  if (!Chart) throw new Error("the chart library did not load");
  const chart = new Chart(canvas, config);
  live.add(chart);
  return chart;
}

export function destroyCharts() {
  for (const chart of live) chart.destroy();
  live.clear();
}

/**
 * Bars with 95 % interval whiskers (a thin floating bar from lo to hi over each bar). items: [{label, value,
 * lo?, hi?, suppressed?}]. horizontal: ranked bars.
 */
export function barsWithIntervals(canvas, items, { horizontal = false, valueLabel = "count", threshold = null } = {}) {
  const labels = items.map((i) => i.label);
  const datasets = [
    {
      label: valueLabel,
      data: items.map((i) => (i.suppressed ? null : i.value)),
      backgroundColor: COLORS.value,
      grouped: false,
      order: 2,
    },
  ];
  if (items.some((i) => i.suppressed)) {  // a grey bar up to the threshold: "somewhere below this, not released"
    datasets.push({
      label: "suppressed (below the release threshold)",
      data: items.map((i) => (i.suppressed ? [0, Number.isFinite(threshold) ? threshold : 0] : null)),
      backgroundColor: COLORS.suppressed,
      borderColor: "#9aa3af",
      borderWidth: 1,
      borderDash: [4, 3],
      grouped: false,
      order: 3,
    });
  }
  if (items.some((i) => Number.isFinite(i.lo))) {
    datasets.push({
      label: "95 % interval",
      data: items.map((i) => (Number.isFinite(i.lo) && !i.suppressed ? [i.lo, i.hi] : null)),
      backgroundColor: COLORS.interval,
      barPercentage: 0.08,
      grouped: false,
      order: 1,
    });
  }
  const valueAxis = { beginAtZero: true, title: { display: true, text: valueLabel } };
  return make(canvas, {
    type: "bar",
    data: { labels, datasets },
    options: {
      indexAxis: horizontal ? "y" : "x",
      scales: horizontal ? { x: valueAxis } : { y: valueAxis },
      plugins: {
        legend: { display: datasets.length > 1 },
      },
    },
  });
}

/** Line series over x with optional 95 % bands. series: [{label, values, lo?, hi?}]. */
export function linesWithBands(canvas, x, series, { yLabel = "", xLabel = "round" } = {}) {
  const datasets = [];
  series.forEach((s, k) => {
    const color = COLORS.series[k % COLORS.series.length];
    if (s.lo && s.hi && s.lo.some(Number.isFinite)) {
      datasets.push({
        label: `${s.label} 95 %`, data: s.hi, borderWidth: 0, pointRadius: 0, fill: "+1",
        backgroundColor: color + "2e", order: 2,
      });
      datasets.push({ label: `${s.label} lo`, data: s.lo, borderWidth: 0, pointRadius: 0, fill: false, order: 2 });
    }
    datasets.push({ label: s.label, data: s.values, borderColor: color, backgroundColor: color, pointRadius: 3, order: 1 });
  });
  return make(canvas, {
    type: "line",
    data: { labels: x, datasets },
    options: {
      scales: { x: { title: { display: true, text: xLabel } }, y: { title: { display: !!yLabel, text: yLabel } } },
      plugins: { legend: { labels: { filter: (item) => !item.text.endsWith(" lo") } } },
    },
  });
}

/** Stepped cumulative line over time (x: unix ms) with a horizontal line at `total`. */
export function timeline(canvas, points, { total = null, yLabel = "ε spent" } = {}) {
  const xs = points.map((p) => p.x);
  const datasets = [
    { label: yLabel, data: points, stepped: true, borderColor: COLORS.value, backgroundColor: COLORS.band, fill: "origin", pointRadius: 3 },
  ];
  if (total !== null && xs.length) {
    datasets.push({
      label: "budget total", data: [{ x: Math.min(...xs), y: total }, { x: Math.max(...xs), y: total }],
      borderColor: COLORS.mean, borderDash: [6, 4], pointRadius: 0,
    });
  }
  return make(canvas, {
    type: "line",
    data: { datasets },
    options: {
      scales: {
        x: {
          type: "linear",
          ticks: { callback: (v) => new Date(v).toLocaleTimeString("en-GB", { hour12: false }), maxTicksLimit: 8 },
          title: { display: true, text: "time" },
        },
        y: { beginAtZero: true, title: { display: true, text: yLabel } },
      },
    },
  });
}

/** Plain bars (no intervals): labels, one or more series. */
export function bars(canvas, labels, series, { horizontal = false, yLabel = "" } = {}) {
  return make(canvas, {
    type: "bar",
    data: {
      labels,
      datasets: series.map((s, k) => ({ label: s.label, data: s.values, backgroundColor: s.color || COLORS.series[k % 6] })),
    },
    options: {
      indexAxis: horizontal ? "y" : "x",
      scales: { [horizontal ? "x" : "y"]: { beginAtZero: true, title: { display: !!yLabel, text: yLabel } } },
      plugins: { legend: { display: series.length > 1 } },
    },
  });
}

/** A line chart that the page appends points to (fleet: check-ins per second). */
export function liveLine(canvas, label, yLabel) {
  return make(canvas, {
    type: "line",
    data: { labels: [], datasets: [{ label, data: [], borderColor: COLORS.value, backgroundColor: COLORS.band, fill: "origin", pointRadius: 0 }] },
    options: { scales: { y: { beginAtZero: true, title: { display: true, text: yLabel } } }, plugins: { legend: { display: false } } },
  });
}
