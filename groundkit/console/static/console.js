// groundkit console: draws each time-series chart with uPlot from the numbers table below it.
// Without JavaScript the table is the chart; nothing else on any page needs a script.
(function () {
  "use strict";
  var palette = ["#1f5fbf", "#d9730d", "#1b7a3a", "#b3261e", "#6b3fa0", "#0f7b8a", "#8a6d00", "#5d6875"];

  function readTable(table) {
    var names = [];
    table.querySelectorAll("thead th").forEach(function (th, i) { if (i > 0) { names.push(th.textContent); } });
    var xs = [];
    var columns = names.map(function () { return []; });
    table.querySelectorAll("tbody tr").forEach(function (tr) {
      xs.push(Number(tr.getAttribute("data-x")));
      tr.querySelectorAll("td[data-v]").forEach(function (td, i) {
        var v = td.getAttribute("data-v");
        columns[i].push(v === "" ? null : Number(v));
      });
    });
    return { names: names, data: [xs].concat(columns) };
  }

  function draw(figure) {
    var table = figure.querySelector("table.chart-data");
    if (!table || typeof uPlot === "undefined") { return; }
    var read = readTable(table);
    if (read.data[0].length === 0) { return; }
    var holder = document.createElement("div");
    holder.className = "plot";
    figure.insertBefore(holder, figure.querySelector("details"));
    var width = function () { return Math.max(240, figure.clientWidth); };
    var unit = table.getAttribute("data-unit") || "";
    // the x range is the data's own; one point alone gets half a day either side
    var lo = Math.min.apply(null, read.data[0]);
    var hi = Math.max.apply(null, read.data[0]);
    if (lo === hi) { lo -= 43200; hi += 43200; }
    var options = {
      width: width(),
      height: 220,
      series: [{}].concat(read.names.map(function (name, i) {
        return { label: name, stroke: palette[i % palette.length], width: 2, points: { size: 6 }, spanGaps: false };
      })),
      axes: [{}, { label: unit, size: 60 }],
      scales: { x: { time: true, range: function () { return [lo, hi]; } } },
      legend: { live: true }
    };
    var plot = new uPlot(options, read.data, holder);
    var details = figure.querySelector("details");
    if (details) { details.open = false; }
    window.addEventListener("resize", function () { plot.setSize({ width: width(), height: 220 }); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("figure.chart").forEach(draw);
  });
})();
