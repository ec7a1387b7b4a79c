// gpudirect-trace report: hover values, one zoom for every time axis,
// sorting and filtering. The page is complete without this script; it
// only adds interaction. Text from the trace is only ever set with
// textContent.
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var body = document.body;
  var T0 = parseFloat(body.getAttribute("data-t0"));
  var T1 = parseFloat(body.getAttribute("data-t1"));
  var PW = parseFloat(body.getAttribute("data-pw"));
  var z0 = T0;
  var z1 = T1;
  var all = function (sel, root) {
    return Array.prototype.slice.call((root || document).querySelectorAll(sel));
  };
  var plots = all("svg.plot");

  // Numbers as the tool prints them (output::bytes, output::ns).
  function si(v) {
    var a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(1) + "G";
    if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (a >= 1e3) return (v / 1e3).toFixed(1) + "k";
    return v % 1 === 0 ? String(v) : v.toFixed(2);
  }
  function bytes(n) {
    var u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    var v = n;
    var i = 0;
    while (v >= 1024 && i < u.length - 1) {
      v /= 1024;
      i++;
    }
    return i === 0 ? String(Math.round(n)) + "B" : v.toFixed(1) + u[i];
  }
  function ns(v) {
    if (v < 1e3) return Math.round(v) + "ns";
    if (v < 1e6) return (v / 1e3).toFixed(1) + "us";
    if (v < 1e9) return (v / 1e6).toFixed(1) + "ms";
    return (v / 1e9).toFixed(2) + "s";
  }
  function num(v) {
    var s = v.toFixed(4);
    return s.indexOf(".") < 0 ? s : s.replace(/0+$/, "").replace(/\.$/, "");
  }
  // The exact value for the hover text, with the short form beside it.
  function exact(u, v) {
    if (u === "b") return bytes(v) + " (" + v + " bytes)";
    if (u === "t") return ns(v) + " (" + v + " ns)";
    if (u === "r") return num(v) + "/s";
    return String(v);
  }
  function ticks(lo, hi, n) {
    var span = Math.max(hi - lo, 1e-12);
    var raw = span / n;
    var mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 5, 10].map(function (m) { return m * mag; })
      .filter(function (s) { return s >= raw * (1 - 1e-9); })[0];
    var out = [];
    for (var k = Math.ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9 && out.length < 50; k++) {
      out.push(k * step);
    }
    return out;
  }
  function xOf(t) {
    return PW * (t - T0) / (T1 - T0);
  }

  // Zoom: every plot shows [z0, z1]; their x labels follow.
  var zoomBox = document.getElementById("zoom");
  var zoomRange = document.getElementById("zoom-range");
  function apply() {
    var x0 = xOf(z0);
    var w = Math.max(xOf(z1) - x0, 1e-9);
    plots.forEach(function (p) {
      p.setAttribute("viewBox", x0 + " 0 " + w + " " + p.getAttribute("height"));
    });
    all("g.xax").forEach(function (g) {
      while (g.firstChild) g.removeChild(g.firstChild);
      ticks(z0, z1, 8).forEach(function (t) {
        var e = document.createElementNS(NS, "text");
        e.setAttribute("x", (PW * (t - z0) / (z1 - z0)).toFixed(1));
        e.setAttribute("y", "12");
        e.setAttribute("text-anchor", "middle");
        e.textContent = num(t) + "s";
        g.appendChild(e);
      });
    });
    if (zoomBox) {
      zoomBox.hidden = !(z0 > T0 || z1 < T1);
      zoomRange.textContent = "showing " + num(z0) + " s to " + num(z1) + " s";
    }
  }
  function reset() {
    z0 = T0;
    z1 = T1;
    apply();
  }
  var resetButton = document.getElementById("zoom-reset");
  if (resetButton) resetButton.addEventListener("click", reset);
  document.addEventListener("keydown", function (e) {
    if (e.key === "Escape") reset();
  });

  // Hover: a cursor on every time chart, the values of the chart under
  // the mouse in a tooltip.
  var tip = document.createElement("div");
  tip.id = "tip";
  tip.hidden = true;
  body.appendChild(tip);
  // Time under the mouse. The plot's background spans the whole window in
  // the plot's own coordinates, zoomed or not, so its box on the screen
  // maps to [T0, T1]. (The plot's own client rect would not do: an SVG
  // element's box is that of what it draws, cursor line included.)
  function tAt(p, clientX) {
    var bg = p.querySelector("rect.bg") || p;
    var r = bg.getBoundingClientRect();
    return T0 + (clientX - r.left) / Math.max(r.width, 1) * (T1 - T0);
  }
  function cursor(t) {
    var x = t === null ? -1e6 : xOf(t);
    plots.forEach(function (p) {
      var c = p.querySelector(".cursor");
      if (c) {
        c.setAttribute("x1", x);
        c.setAttribute("x2", x);
      }
    });
  }
  function data(fig) {
    if (!fig._d) {
      fig._d = {
        b0: parseFloat(fig.getAttribute("data-b0")),
        bw: parseFloat(fig.getAttribute("data-bw")),
        u: fig.getAttribute("data-u"),
        n: (fig.getAttribute("data-n") || "").split("|"),
        v: (fig.getAttribute("data-v") || "").split(";").map(function (s) {
          return s.split(",").map(function (x) { return x === "" ? null : parseFloat(x); });
        })
      };
    }
    return fig._d;
  }
  function hover(ev, p) {
    var t = tAt(p, ev.clientX);
    cursor(t);
    var fig = p.closest("figure");
    if (!fig || !fig.hasAttribute("data-v")) {
      tip.hidden = true;
      return;
    }
    var d = data(fig);
    var i = Math.floor((t - d.b0) / d.bw);
    var lines = [num(t) + " s (bucket " + num(d.b0 + i * d.bw) + " s to " + num(d.b0 + (i + 1) * d.bw) + " s)"];
    d.n.forEach(function (name, k) {
      var v = (d.v[k] || [])[i];
      lines.push(name + ": " + (v === undefined || v === null ? "no data" : exact(d.u, v)));
    });
    tip.textContent = lines.join("\n");
    tip.hidden = false;
    var left = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
    tip.style.left = Math.max(left, 0) + "px";
    tip.style.top = ev.clientY + 14 + "px";
  }

  // Drag across any time chart to zoom all of them; double-click resets.
  var drag = null;
  function moveDrag(ev) {
    var t = tAt(drag.p, ev.clientX);
    var a = Math.min(drag.t, t);
    drag.rect.setAttribute("x", xOf(a));
    drag.rect.setAttribute("width", Math.abs(xOf(t) - xOf(drag.t)));
  }
  plots.forEach(function (p) {
    p.addEventListener("mousemove", function (ev) {
      if (drag) moveDrag(ev);
      else hover(ev, p);
    });
    p.addEventListener("mouseleave", function () {
      if (!drag) {
        tip.hidden = true;
        cursor(null);
      }
    });
    p.addEventListener("mousedown", function (ev) {
      if (ev.button !== 0) return;
      ev.preventDefault();
      var r = document.createElementNS(NS, "rect");
      r.setAttribute("class", "sel");
      r.setAttribute("y", "0");
      r.setAttribute("height", p.getAttribute("height"));
      r.setAttribute("width", "0");
      p.appendChild(r);
      drag = { p: p, t: tAt(p, ev.clientX), x: ev.clientX, rect: r };
      moveDrag(ev);
    });
    p.addEventListener("dblclick", reset);
  });
  document.addEventListener("mousemove", function (ev) {
    if (drag) moveDrag(ev);
  });
  document.addEventListener("mouseup", function (ev) {
    if (!drag) return;
    var d = drag;
    drag = null;
    d.p.removeChild(d.rect);
    if (Math.abs(ev.clientX - d.x) < 4) return;
    var t = tAt(d.p, ev.clientX);
    var a = Math.max(T0, Math.min(d.t, t));
    var b = Math.min(T1, Math.max(d.t, t));
    if (b - a > (T1 - T0) * 1e-6) {
      z0 = a;
      z1 = b;
      apply();
    }
  });

  // Sorting: click a column heading (again to reverse).
  all("table.sortable").forEach(function (tab) {
    if (!tab.tHead || !tab.tBodies[0]) return;
    var ths = Array.prototype.slice.call(tab.tHead.rows[0].cells);
    ths.forEach(function (th, col) {
      th.title = "sort by " + th.textContent;
      th.addEventListener("click", function () {
        var dir = th.getAttribute("aria-sort") === "ascending" ? "descending" : "ascending";
        ths.forEach(function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", dir);
        var numeric = th.getAttribute("data-type") === "num";
        var tb = tab.tBodies[0];
        var key = function (r) {
          var c = r.cells[col];
          if (!c) return "";
          var k = c.getAttribute("data-k");
          return k !== null ? k : c.textContent.trim();
        };
        var rows = Array.prototype.slice.call(tb.rows);
        rows.sort(function (a, b) {
          var x = key(a);
          var y = key(b);
          var c = numeric ? (parseFloat(x) || 0) - (parseFloat(y) || 0) : x < y ? -1 : x > y ? 1 : 0;
          return dir === "ascending" ? c : -c;
        });
        rows.forEach(function (r) { tb.appendChild(r); });
      });
    });
  });

  // Filtering the incidents: text and categories.
  var filt = document.getElementById("inc-filters");
  var q = document.getElementById("inc-q");
  var count = document.getElementById("inc-count");
  var itab = document.getElementById("incident-table");
  function filter() {
    var text = q.value.toLowerCase().trim();
    var cats = {};
    all("input.cat", filt).forEach(function (c) { cats[c.value] = c.checked; });
    var rows = itab.tBodies[0].rows;
    var shown = 0;
    Array.prototype.forEach.call(rows, function (r) {
      var ok = cats[r.getAttribute("data-cat")] !== false &&
        (!text || r.textContent.toLowerCase().indexOf(text) >= 0);
      r.hidden = !ok;
      if (ok) shown++;
    });
    count.textContent = shown + " of " + rows.length + " incidents shown";
  }
  function showAll() {
    q.value = "";
    all("input.cat", filt).forEach(function (x) { x.checked = true; });
    filter();
  }
  if (filt && q && itab) {
    filt.hidden = false;
    q.addEventListener("input", filter);
    filt.addEventListener("change", filter);
    filter();
    // The verdict's links pick one category.
    all("a[data-cat]").forEach(function (a) {
      a.addEventListener("click", function () {
        var c = a.getAttribute("data-cat");
        q.value = "";
        all("input.cat", filt).forEach(function (x) { x.checked = x.value === c; });
        filter();
      });
    });
    // A link to a row the filter hides shows every row again.
    var reveal = function () {
      var el = location.hash.length > 1 && document.getElementById(location.hash.slice(1));
      if (el && el.tagName === "TR" && el.hidden) {
        showAll();
        el.scrollIntoView();
      }
    };
    window.addEventListener("hashchange", reveal);
    reveal();
  }
})();
