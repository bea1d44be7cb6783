// evs console: talks to this server's API with the key kept in this tab's
// sessionStorage. No framework, no build step, no third-party request.
"use strict";
(function () {
  var KEY = "evs.apiKey";
  var STATUSES = ["deliverable", "undeliverable", "risky", "unknown"];
  var POLL_MS = 1000;
  var $ = function (id) { return document.getElementById(id); };
  var batch = null; // {id, cursor, timer}

  function key() { return sessionStorage.getItem(KEY) || ""; }

  function showKeyState() {
    var k = key();
    $("key-state").textContent = k ? "A key is in use in this tab (…" + k.slice(-4) + ")." : "No key yet: paste one above.";
  }

  function showError(text) {
    var e = $("error");
    e.textContent = text;
    e.hidden = !text;
  }

  // APIError carries the contract's error envelope in words.
  function APIError(status, code, message, requestId) {
    this.text = message + " (" + code + ", HTTP " + status + (requestId ? ", request id " + requestId : "") + ")";
  }

  // api calls path with the key; it resolves with the parsed JSON (or a
  // Blob when asked for CSV) and rejects with an APIError in words.
  function api(method, path, body, contentType, accept) {
    if (!key()) { return Promise.reject({ text: "Paste an API key first." }); }
    var headers = { "X-Api-Key": key(), "Accept": accept || "application/json" };
    if (body !== undefined) { headers["Content-Type"] = contentType || "application/json"; }
    // API paths ("/v1/...") are resolved from the console's own address,
    // one level up: /console/ on `evs serve`, /{stage}/console/ on AWS.
    var url = path.charAt(0) === "/" ? ".." + path : path;
    return fetch(url, { method: method, headers: headers, body: body, cache: "no-store", credentials: "omit" })
      .catch(function () { throw { text: "Could not reach the server: check that it is running." }; })
      .then(function (res) {
        var rid = res.headers.get("X-Request-Id") || "";
        if (res.ok) { return accept === "text/csv" ? res.blob() : res.json(); }
        return res.json().catch(function () { return {}; }).then(function (j) {
          var e = j && j.error ? j.error : {};
          var words = e.message || res.statusText || "The server answered with an error.";
          if (res.status === 401) { words += " Check the key."; }
          if (res.status === 429) { words += " Retry in " + (res.headers.get("Retry-After") || "a few") + " s."; }
          throw new APIError(res.status, e.code || "error", words, e.requestId || rid);
        });
      });
  }

  function fail(err) { showError(err && err.text ? err.text : String(err)); }

  function el(tag, text, cls) {
    var n = document.createElement(tag);
    if (text !== undefined && text !== null) { n.textContent = String(text); }
    if (cls) { n.className = cls; }
    return n;
  }

  function clear(n) { while (n.firstChild) { n.removeChild(n.firstChild); } }

  function badge(n, status) { n.textContent = status; n.className = "badge s-" + status; }

  // describe turns one check's evidence object into readable words.
  function describe(v) {
    if (v === null || v === undefined) { return "—"; }
    if (typeof v !== "object") { return String(v); }
    if (Array.isArray(v)) { return v.length ? v.join(", ") : "none"; }
    return Object.keys(v).map(function (k) { return k + ": " + describe(v[k]); }).join("; ");
  }

  // --- key ---
  $("key-form").addEventListener("submit", function (ev) {
    ev.preventDefault();
    var k = $("key").value.trim();
    if (!/^evs\.[A-Za-z0-9_-]{43}$/.test(k)) { showError("That is not an evs API key: it starts with evs. and has 43 more characters."); return; }
    sessionStorage.setItem(KEY, k);
    $("key").value = "";
    showError("");
    showKeyState();
  });
  $("key-forget").addEventListener("click", function () { sessionStorage.removeItem(KEY); showKeyState(); });

  // --- verify one address ---
  function verify(email) {
    showError("");
    $("verify-go").disabled = true;
    api("POST", "/v1/verify", JSON.stringify({ email: email, mode: $("verify-mode").value }))
      .then(showDecision, fail)
      .then(function () { $("verify-go").disabled = false; });
  }

  function showDecision(r) {
    var d = r.decision || {};
    badge($("verify-status"), r.status);
    $("verify-reason").textContent = d.reason + (d.testMode ? " (test mode)" : "") + (d.cached ? " (from cache)" : "");
    $("verify-normalized").textContent = d.normalized || d.email || "";
    $("verify-score").textContent = d.score === undefined ? "—" : d.score + " / 100";
    var flags = d.flags || {};
    var on = Object.keys(flags).filter(function (f) { return flags[f]; });
    $("verify-flags").textContent = on.length ? on.join(", ") : "none";
    var s = $("verify-suggestion");
    clear(s);
    if (d.suggestion) {
      var b = el("button", d.suggestion, "link");
      b.type = "button";
      b.id = "verify-suggestion-use";
      b.setAttribute("aria-label", "Verify the suggestion " + d.suggestion);
      b.addEventListener("click", function () { $("verify-email").value = d.suggestion; verify(d.suggestion); });
      s.appendChild(b);
    } else {
      s.textContent = "none";
    }
    var ev = $("verify-evidence");
    clear(ev);
    var checks = d.checks || {};
    Object.keys(checks).forEach(function (c) { ev.appendChild(el("dt", c)); ev.appendChild(el("dd", describe(checks[c]))); });
    ev.appendChild(el("dt", "checked at"));
    ev.appendChild(el("dd", (d.checkedAt || "") + (d.durationMs !== undefined ? " in " + d.durationMs + " ms" : "")));
    $("verify-result").hidden = false;
  }

  $("verify-form").addEventListener("submit", function (ev) {
    ev.preventDefault();
    verify($("verify-email").value.trim());
  });

  // --- lists ---
  function splitAddresses(text) {
    return text.split(/[\s,;]+/).map(function (a) { return a.trim(); }).filter(function (a) { return a !== ""; });
  }

  function listMode() { return document.querySelector("input[name=list-mode]:checked").value; }

  $("list-form").addEventListener("submit", function (ev) {
    ev.preventDefault();
    showError("");
    var file = $("list-file").files[0];
    var mode = listMode();
    var start;
    if (file) {
      start = file.text().then(function (text) {
        if (/\.txt$/i.test(file.name) || file.type === "text/plain") {
          return api("POST", "/v1/requests", JSON.stringify({ emails: splitAddresses(text), mode: mode }));
        }
        return api("POST", "/v1/requests?mode=" + encodeURIComponent(mode), text, "text/csv");
      });
    } else {
      var emails = splitAddresses($("list-paste").value);
      if (!emails.length) { showError("Pick a file or paste at least one address."); return; }
      start = api("POST", "/v1/requests", JSON.stringify({ emails: emails, mode: mode }));
    }
    $("list-go").disabled = true;
    start.then(function (env) { follow(env); }, fail).then(function () { $("list-go").disabled = false; });
  });

  function follow(env) {
    if (batch && batch.timer) { clearTimeout(batch.timer); }
    batch = { id: env.request.id, cursor: null, timer: null };
    $("batch-id").textContent = batch.id;
    $("batch-final").hidden = true;
    $("results-filter").value = ""; // a new list starts with every row shown
    $("batch").hidden = false;
    showBatch(env);
  }

  function isFinal(state) { return state === "completed" || state === "cancelled" || state === "failed"; }

  function showBatch(env) {
    var r = env.request, c = env.counters;
    var todo = c.total - c.duplicates;
    var pct = todo > 0 ? Math.floor(100 * c.processed / todo) : 100;
    $("batch-state").textContent = r.state + (r.error ? ": " + r.error : "");
    $("batch-done").textContent = c.processed + " of " + todo + " addresses verified (" + pct + "%)";
    var p = $("batch-progress");
    p.max = Math.max(todo, 1);
    p.value = todo > 0 ? c.processed : 1;
    var dl = $("batch-counters");
    clear(dl);
    ["total", "duplicates", "processed"].concat(STATUSES).forEach(function (k) {
      dl.appendChild(el("dt", k));
      var dd = el("dd", c[k]);
      dd.id = "count-" + k;
      dl.appendChild(dd);
    });
    $("batch-cancel").disabled = isFinal(r.state);
    if (isFinal(r.state)) {
      drawBreakdown(c);
      $("batch-final").hidden = false;
      loadResults(true);
      return;
    }
    batch.timer = setTimeout(poll, POLL_MS);
  }

  function poll() {
    var id = batch.id;
    api("GET", "/v1/requests/" + id).then(function (env) {
      if (batch && batch.id === id) { showBatch(env); }
    }, function (err) {
      fail(err);
      if (batch && batch.id === id) { batch.timer = setTimeout(poll, 5 * POLL_MS); }
    });
  }

  $("batch-cancel").addEventListener("click", function () {
    if (!batch) { return; }
    if (batch.timer) { clearTimeout(batch.timer); }
    api("POST", "/v1/requests/" + batch.id + "/cancel").then(showBatch, function (err) { fail(err); poll(); });
  });

  // drawBreakdown draws the counters by status as a horizontal bar chart.
  function drawBreakdown(c) {
    var NS = "http://www.w3.org/2000/svg";
    var box = $("breakdown");
    clear(box);
    var max = Math.max.apply(null, STATUSES.map(function (s) { return c[s]; }).concat([1]));
    var rowH = 28, labelW = 120, barW = 220, width = labelW + barW + 60;
    var svg = document.createElementNS(NS, "svg");
    svg.setAttribute("viewBox", "0 0 " + width + " " + (rowH * STATUSES.length));
    svg.setAttribute("width", String(width));
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", STATUSES.map(function (s) { return s + " " + c[s]; }).join(", "));
    STATUSES.forEach(function (s, i) {
      var y = i * rowH;
      var g = document.createElementNS(NS, "g");
      g.setAttribute("data-status", s);
      g.setAttribute("data-count", String(c[s]));
      var label = document.createElementNS(NS, "text");
      label.setAttribute("x", "0"); label.setAttribute("y", String(y + 19));
      label.textContent = s;
      var bar = document.createElementNS(NS, "rect");
      bar.setAttribute("x", String(labelW)); bar.setAttribute("y", String(y + 5));
      bar.setAttribute("height", "18");
      bar.setAttribute("width", String(Math.round(barW * c[s] / max)));
      bar.setAttribute("class", "s-" + s);
      var n = document.createElementNS(NS, "text");
      n.setAttribute("x", String(labelW + Math.round(barW * c[s] / max) + 6)); n.setAttribute("y", String(y + 19));
      n.textContent = String(c[s]);
      g.appendChild(label); g.appendChild(bar); g.appendChild(n);
      svg.appendChild(g);
    });
    box.appendChild(svg);
  }

  function resultsPath(status, extra) {
    var q = [];
    if (status) { q.push("status=" + encodeURIComponent(status)); }
    if (extra) { q.push(extra); }
    return "/v1/requests/" + batch.id + "/results" + (q.length ? "?" + q.join("&") : "");
  }

  function loadResults(fresh) {
    var tbody = $("results").tBodies[0];
    if (fresh) { clear(tbody); batch.cursor = null; }
    var extra = "limit=100" + (batch.cursor ? "&cursor=" + encodeURIComponent(batch.cursor) : "");
    var id = batch.id;
    api("GET", resultsPath($("results-filter").value, extra)).then(function (page) {
      if (!batch || batch.id !== id) { return; }
      page.results.forEach(function (r) {
        var d = r.decision || {};
        var tr = el("tr");
        tr.appendChild(el("td", r.email));
        var st = el("td"); st.appendChild(el("span", r.status, "badge s-" + r.status)); tr.appendChild(st);
        tr.appendChild(el("td", d.reason));
        tr.appendChild(el("td", d.score === undefined ? "—" : d.score));
        tr.appendChild(el("td", d.suggestion || ""));
        tbody.appendChild(tr);
      });
      batch.cursor = page.nextCursor;
      $("results-more").hidden = !page.nextCursor;
    }, fail);
  }

  $("results-filter").addEventListener("change", function () { loadResults(true); });
  $("results-more").addEventListener("click", function () { loadResults(false); });

  // download fetches the CSV with the key (a plain link could not send
  // it) and hands it to the browser as a file.
  function download(status, name) {
    showError("");
    api("GET", resultsPath(status), undefined, undefined, "text/csv").then(function (blob) {
      var url = URL.createObjectURL(blob);
      var a = el("a");
      a.href = url;
      a.download = name;
      document.body.appendChild(a);
      a.click();
      a.remove();
      setTimeout(function () { URL.revokeObjectURL(url); }, 10000);
    }, fail);
  }
  $("download-all").addEventListener("click", function () { download("", "evs-" + batch.id + ".csv"); });
  $("download-deliverable").addEventListener("click", function () { download("deliverable", "evs-" + batch.id + "-deliverable.csv"); });

  showKeyState();
})();
