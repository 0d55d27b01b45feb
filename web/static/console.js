// The console's page behaviour: htmx answers that refuse something (4xx) are swapped
// like any other (the server retargets them to the flash area); a 401 means the
// session ended, so the browser goes to the sign-in page.
document.addEventListener("htmx:beforeSwap", function (evt) {
  const status = evt.detail.xhr.status;
  if (status === 401) {
    window.location.href = "/console/login?next=" + encodeURIComponent(window.location.pathname);
    evt.detail.shouldSwap = false;
  } else if (status >= 400 && status < 500) {
    evt.detail.shouldSwap = true;
    evt.detail.isError = false;
  }
});

// Live chart on the overview page: seeded from the page's history, then one
// point per "stats" message that htmx-ext-sse swaps into #live-stats.
(function () {
  "use strict";
  const MAX_POINTS = 300;
  let chart = null;
  const data = [[], [], [], []]; // x (s), tokens/s, running, waiting

  function push(ts, tokens, running, waiting) {
    data[0].push(ts); data[1].push(tokens); data[2].push(running); data[3].push(waiting);
    if (data[0].length > MAX_POINTS) data.forEach((col) => col.shift());
  }

  function build() {
    const el = document.getElementById("live-chart");
    if (!el || typeof uPlot === "undefined") return;
    const history = JSON.parse(document.getElementById("live-history").textContent || "[]");
    history.forEach((p) => push(p.wall_ts, p.output_tokens_per_s, p.num_running, p.num_waiting));
    chart = new uPlot({
      width: Math.max(320, el.clientWidth), height: 220,
      scales: { x: { time: true } },
      series: [
        {},
        { label: "output tokens/s", stroke: "#2563eb", width: 2 },
        { label: "running", stroke: "#16a34a", scale: "seqs" },
        { label: "waiting", stroke: "#dc2626", scale: "seqs" },
      ],
      axes: [{}, { label: "tokens/s" }, { side: 1, scale: "seqs", label: "sequences", grid: { show: false } }],
    }, data, el);
  }

  document.addEventListener("DOMContentLoaded", build);
  document.body.addEventListener("htmx:sseMessage", function (evt) {
    if (!chart || evt.detail.type !== "stats") return;
    const cards = document.querySelector("#live-stats .cards");
    if (!cards || !cards.dataset.ts) return;
    push(parseFloat(cards.dataset.ts), parseFloat(cards.dataset.tokensPerS),
         parseInt(cards.dataset.running, 10), parseInt(cards.dataset.waiting, 10));
    chart.setData(data);
  });
})();
