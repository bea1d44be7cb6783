// evs console: talks to this server's API with the key kept in this tab's
// sessionStorage. No framework, no build step, no third-party request.
"use strict";
(function () {
  var KEY = "evs.apiKey";
  var STATUSES = ["deliverable", "undeliverable", "risky", "unknown"];
  var POLL_MS = 1000;
  // Lists above DIRECT_MAX_BYTES go through /v1/uploads (contract,
  // section 14) instead of the body of POST /v1/requests: a body is
  // limited to 50,000 addresses and 6 MiB (4 MiB on AWS), and 256 KiB
  // cannot hold 50,000 addresses (the shortest line, "a@b.cd", is 7 bytes),
  // so a list sent directly never meets either limit.
  var DIRECT_MAX_BYTES = 256 * 1024;
  var $ = function (id) { return document.getElementById(id); };
  var PAST_PAGE = 10; // past batches a page
  var ETA_WINDOW_MS = 30000;
  var batch = null; // {id, cursor, timer, seen, live}
  var past = { gen: 0, cursor: null };
  var NO_KEY_PAST = "Use a key to see its account's batches.";

  function key() { return sessionStorage.getItem(KEY) || ""; }

  function showKeyState() {
    var k = key();
    $("key-state").textContent = k ? "A key is in use in this tab (…" + k.slice(-4) + ")." : "No key yet: paste one above.";
    $("key-state").classList.remove("refused");
  }

  // dropKey forgets the key and what the page read with it (the past
  // batches); why, when given, replaces the words of the key's state.
  function dropKey(why) {
    sessionStorage.removeItem(KEY);
    showKeyState();
    if (why) { $("key-state").textContent = why; $("key-state").classList.add("refused"); }
    past.gen++;
    clear($("past").tBodies[0]);
    $("past-more").hidden = true;
    $("past-empty").textContent = NO_KEY_PAST;
    $("past-empty").hidden = false;
  }

  // refused drops a key the server answered 401 to (unless another key
  // has been used since it was sent), so that the page never says a key
  // is in use when none works, and asks for one again.
  function refused(k) {
    if (!k || key() !== k) { return; }
    $("key").setAttribute("aria-invalid", "true");
    dropKey("The server refused the key …" + k.slice(-4) + ": no key is in use. Paste a valid key above.");
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

  // refusal turns a non-2xx reply into an APIError from its envelope.
  function refusal(status, statusText, rid, retryAfter, j) {
    var e = j && j.error ? j.error : {};
    var words = e.message || statusText || "The server answered with an error.";
    if (status === 401) { words += " Check the key."; }
    if (status === 429) { words += " Retry in " + (retryAfter || "a few") + " s."; }
    return new APIError(status, e.code || "error", words, e.requestId || rid);
  }

  // call sends method path with the key and resolves with the Response
  // when it is a 2xx; it rejects with an APIError in words.
  function call(method, path, body, contentType, accept) {
    var k = key();
    if (!k) { return Promise.reject({ text: "Paste an API key first." }); }
    var headers = { "X-Api-Key": k, "Accept": accept || "application/json" };
    if (body !== undefined) { headers["Content-Type"] = contentType || "application/json"; }
    // API paths ("/v1/...") are resolved from the console's own address,
    // one level up: /console/ on `evs serve`, /{stage}/console/ on AWS.
    var url = path.charAt(0) === "/" ? ".." + path : path;
    return fetch(url, { method: method, headers: headers, body: body, cache: "no-store", credentials: "omit" })
      .catch(function () { throw { text: "Could not reach the server: check that it is running." }; })
      .then(function (res) {
        if (res.ok) { return res; }
        if (res.status === 401) { refused(k); }
        return res.json().catch(function () { return {}; }).then(function (j) {
          throw refusal(res.status, res.statusText, res.headers.get("X-Request-Id") || "", res.headers.get("Retry-After"), j);
        });
      });
  }

  // ready is call for GET path on a route that may answer 202 while the
  // server prepares the reply (on AWS a large CSV export is a job the
  // worker writes): it asks again after each Retry-After (1 to 30 s)
  // until the reply is something else.
  function ready(path, accept) {
    return call("GET", path, undefined, undefined, accept).then(function (res) {
      if (res.status !== 202) { return res; }
      var wait = Math.min(Math.max(parseInt(res.headers.get("Retry-After"), 10) || 2, 1), 30);
      return new Promise(function (done) { setTimeout(done, wait * 1000); }).then(function () { return ready(path, accept); });
    });
  }

  // api is call for JSON replies (or a Blob when asked for CSV).
  function api(method, path, body, contentType, accept) {
    return call(method, path, body, contentType, accept).then(function (res) {
      return accept === "text/csv" ? res.blob() : res.json();
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

  function megabytes(n) { return n < 1048576 ? Math.ceil(n / 1024) + " KB" : (n / 1048576).toFixed(1) + " MB"; }

  // duration says a number of seconds the way a person reads it.
  function duration(s) {
    s = Math.max(1, Math.round(s));
    if (s < 90) { return s + " s"; }
    if (s < 5400) { return Math.round(s / 60) + " min"; }
    return Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " min";
  }

  // --- key ---
  $("key-form").addEventListener("submit", function (ev) {
    ev.preventDefault();
    var k = $("key").value.trim();
    if (!/^evs\.[A-Za-z0-9_-]{43}$/.test(k)) { showError("That is not an evs API key: it starts with evs. and has 43 more characters."); return; }
    sessionStorage.setItem(KEY, k);
    $("key").value = "";
    $("key").removeAttribute("aria-invalid");
    showError("");
    showKeyState();
    loadPast(true);
  });
  $("key-forget").addEventListener("click", function () {
    $("key").removeAttribute("aria-invalid");
    dropKey();
  });

  // --- verify one address ---
  // verify shows the verdict of this submission, or its error: the last
  // verdict leaves the screen as soon as another is asked for, and the
  // reply to an older submission is dropped.
  var verifyGen = 0;
  function verify(email) {
    var gen = ++verifyGen;
    showError("");
    $("verify-result").hidden = true;
    if (!email) { showError("Type an address to verify."); $("verify-go").disabled = false; return; }
    $("verify-go").disabled = true;
    api("POST", "/v1/verify", JSON.stringify({ email: email, mode: $("verify-mode").value }))
      .then(function (r) { if (gen === verifyGen) { showDecision(r); } }, function (err) { if (gen === verifyGen) { fail(err); } })
      .then(function () { if (gen === verifyGen) { $("verify-go").disabled = false; } });
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

  function listStatus(text) { $("list-status").textContent = text; }

  function showFileName() {
    var f = $("list-file").files[0];
    $("list-file-name").textContent = f ? f.name + " (" + megabytes(f.size) + ")" : "";
  }
  $("list-file").addEventListener("change", showFileName);

  // A file dropped anywhere on the list form is the file picked.
  var drop = $("list-form");
  drop.addEventListener("dragover", function (ev) { ev.preventDefault(); drop.classList.add("dragging"); });
  drop.addEventListener("dragleave", function () { drop.classList.remove("dragging"); });
  drop.addEventListener("drop", function (ev) {
    ev.preventDefault();
    drop.classList.remove("dragging");
    if (ev.dataTransfer && ev.dataTransfer.files.length) {
      $("list-file").files = ev.dataTransfer.files;
      showFileName();
    }
  });

  // send PUTs body to an upload's URL, showing how much has left; it
  // uses XMLHttpRequest because fetch reports no upload progress. The
  // URL carries its own credential: the key is not sent with it.
  function send(up, body, contentType) {
    return new Promise(function (resolve, reject) {
      var x = new XMLHttpRequest();
      var bar = $("upload-progress");
      bar.max = Math.max(body.size, 1);
      bar.value = 0;
      bar.hidden = false;
      x.upload.onprogress = function (e) {
        bar.value = e.loaded;
        listStatus("Sending the list: " + megabytes(e.loaded) + " of " + megabytes(body.size) + ".");
      };
      x.onload = function () {
        bar.hidden = true;
        if (x.status >= 200 && x.status < 300) { resolve(); return; }
        var j = {};
        try { j = JSON.parse(x.responseText); } catch (e) { j = {}; }
        reject(refusal(x.status, x.statusText, x.getResponseHeader("X-Request-Id") || "", x.getResponseHeader("Retry-After"), j));
      };
      x.onerror = function () { bar.hidden = true; reject({ text: "The list could not be sent: the connection failed." }); };
      x.open(up.method || "PUT", up.url);
      x.setRequestHeader("Content-Type", contentType);
      x.send(body);
    });
  }

  // mayConnect tells whether the page's Content-Security-Policy lets it
  // send to origin: its own, or one its connect-src names (on AWS, the
  // upload bucket's). A page cannot read its own headers, so it asks for
  // itself again (a 304 when unchanged) and reads the policy there, rather
  // than let the browser refuse the PUT as a violation.
  function mayConnect(origin) {
    if (origin === location.origin) { return Promise.resolve(true); }
    return fetch(location.href, { cache: "no-cache", credentials: "omit" }).then(function (res) {
      var m = /(?:^|;)\s*connect-src([^;]*)/.exec(res.headers.get("Content-Security-Policy") || "");
      return !!m && m[1].trim().split(/\s+/).indexOf(origin) >= 0;
    }, function () { return false; });
  }

  // viaUpload makes a batch of a large list: POST /v1/uploads, PUT the
  // list to the URL it returns, then POST /v1/requests with the uploadId.
  function viaUpload(body, contentType, mode) {
    listStatus("Preparing the upload…");
    return api("POST", "/v1/uploads", JSON.stringify({ contentType: contentType })).then(function (up) {
      if (body.size > up.maxBytes) {
        throw { text: "The list is " + megabytes(body.size) + "; the most one upload takes is " + megabytes(up.maxBytes) + ". Split it." };
      }
      var origin = new URL(up.url, location.href).origin;
      return mayConnect(origin).then(function (ok) {
        if (!ok) {
          // On evs serve the policy allows this origin only; there,
          // EVS_PUBLIC_URL names another one.
          throw { text: "The server hands out upload URLs at " + origin + ": open the console there." };
        }
        return send(up, body, contentType);
      }).then(function () {
        listStatus("Sent; creating the batch…");
        return api("POST", "/v1/requests", JSON.stringify(named({ uploadId: up.uploadId, mode: mode })));
      });
    });
  }

  // listName is the name typed for the next list, or "" for none.
  function listName() { return $("list-name").value.trim(); }

  // named adds the typed name, if any, to a creation's body.
  function named(body) {
    var name = listName();
    if (name) { body.name = name; }
    return body;
  }

  // readText reads a small list as the API would read it: UTF-8, its BOM
  // kept as sent; UTF-16 refused in the API's words. Bytes that are not
  // UTF-8 are read as Windows-1252 (what Excel on Windows saves as "CSV"),
  // and the page says so, instead of turning each into U+FFFD unseen.
  // A large list goes as it is, and the API refuses what is not UTF-8.
  function readText(file) {
    return file.arrayBuffer().then(function (buf) {
      var b = new Uint8Array(buf);
      if (b.length >= 2 && ((b[0] === 0xff && b[1] === 0xfe) || (b[0] === 0xfe && b[1] === 0xff))) {
        throw { text: "The CSV file is UTF-16 (Excel's \"Unicode text\"); save it as \"CSV UTF-8\"." };
      }
      try {
        return new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(b);
      } catch (e) {
        $("list-note").textContent = file.name + " is not UTF-8: it was read as Windows-1252 (Excel's \"CSV\" on Windows) and sent as UTF-8. " +
          "Check its names in the results, or save it as \"CSV UTF-8\".";
        $("list-note").hidden = false;
        return new TextDecoder("windows-1252").decode(b);
      }
    });
  }

  // startList creates the batch of the picked file or the pasted text,
  // directly when small, through an upload when large.
  function startList(file, mode) {
    if (file) {
      var txt = /\.txt$/i.test(file.name) || file.type === "text/plain";
      if (file.size > DIRECT_MAX_BYTES) {
        // One address a line is a CSV file of one column; the page
        // never reads a large file, the browser streams it.
        return viaUpload(file, "text/csv", mode);
      }
      return readText(file).then(function (text) {
        if (txt) { return api("POST", "/v1/requests", JSON.stringify(named({ emails: splitAddresses(text), mode: mode }))); }
        var name = listName();
        return api("POST", "/v1/requests?mode=" + encodeURIComponent(mode) + (name ? "&name=" + encodeURIComponent(name) : ""), text, "text/csv");
      });
    }
    var emails = splitAddresses($("list-paste").value);
    if (!emails.length) { return Promise.reject({ text: "Pick a file or paste at least one address." }); }
    var json = JSON.stringify(named({ emails: emails, mode: mode }));
    if (json.length > DIRECT_MAX_BYTES) {
      return viaUpload(new Blob([JSON.stringify({ emails: emails })], { type: "application/json" }), "application/json", mode);
    }
    return api("POST", "/v1/requests", json);
  }

  $("list-form").addEventListener("submit", function (ev) {
    ev.preventDefault();
    showError("");
    $("list-note").hidden = true;
    $("list-go").disabled = true;
    startList($("list-file").files[0], listMode())
      .then(function (env) { listStatus(""); follow(env); loadPast(true); }, function (err) { listStatus(""); fail(err); })
      .then(function () { $("list-go").disabled = false; });
  });

  function follow(env) {
    if (batch && batch.timer) { clearTimeout(batch.timer); }
    batch = { id: env.request.id, cursor: null, timer: null, seen: [], reasonStatus: {}, gen: 0, live: !isFinal(env.request.state) };
    $("batch-id").textContent = batch.id;
    $("batch-final").hidden = true;
    // A new list starts with every row shown.
    $("results-filter").value = "";
    $("results-flag").value = "";
    reasonChoices([]);
    $("batch").hidden = false;
    showBatch(env);
  }

  function isFinal(state) { return state === "completed" || state === "cancelled" || state === "failed"; }

  // estimate says how long the rest takes at the rate of the last
  // ETA_WINDOW_MS (the rate changes: a queued start, a worker warming up,
  // a slow domain), from the counts the page has seen.
  function estimate(done, todo, final) {
    if (final) { return ""; }
    var now = Date.now(), seen = batch.seen;
    seen.push({ t: now, p: done });
    while (seen.length > 2 && now - seen[1].t >= ETA_WINDOW_MS) { seen.shift(); }
    var rate = (done - seen[0].p) / ((now - seen[0].t) / 1000);
    if (!(rate > 0)) { return "estimating the time left…"; }
    return "about " + duration((todo - done) / rate) + " left (" + Math.round(rate) + " addresses/s)";
  }

  function showBatch(env) {
    var r = env.request, c = env.counters;
    var todo = c.total - c.duplicates;
    var pct = todo > 0 ? Math.floor(100 * c.processed / todo) : 100;
    // Announced to screen readers (aria-live) when it changes, not at
    // every poll.
    var state = r.state + (r.error ? ": " + r.error : "");
    if ($("batch-state").textContent !== state) { $("batch-state").textContent = state; }
    $("batch-done").textContent = c.processed + " of " + todo + " addresses verified (" + pct + "%)";
    $("batch-eta").textContent = estimate(c.processed, todo, isFinal(r.state));
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
      if (batch.live) { batch.live = false; loadPast(true); } // its row's state changed
      drawChart($("breakdown"), "Addresses by status", "status", STATUSES.map(function (s) { return { label: s, status: s, count: c[s] }; }));
      $("batch-final").hidden = false;
      loadResults(true);
      loadReasons(batch.id);
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
    api("POST", "/v1/requests/" + batch.id + "/cancel").then(showBatch,
      function (err) { fail(err); poll(); });
  });

  // drawChart draws rows ({label, status, count}) as a horizontal bar
  // chart in box, with the same figures in a table beside it for those
  // who do not see the chart.
  function drawChart(box, title, kind, rows) {
    var NS = "http://www.w3.org/2000/svg";
    clear(box);
    var total = rows.reduce(function (a, r) { return a + r.count; }, 0);
    var max = Math.max.apply(null, rows.map(function (r) { return r.count; }).concat([1]));
    var rowH = 28, labelW = 170, barW = 200, width = labelW + barW + 70;
    var svg = document.createElementNS(NS, "svg");
    svg.setAttribute("viewBox", "0 0 " + width + " " + (rowH * Math.max(rows.length, 1)));
    svg.setAttribute("width", String(width));
    svg.setAttribute("role", "img");
    var summary = title + ": " + rows.map(function (r) { return r.label + " " + r.count; }).join(", ");
    svg.setAttribute("aria-label", summary);
    var t = document.createElementNS(NS, "title");
    t.textContent = summary;
    svg.appendChild(t);
    rows.forEach(function (r, i) {
      var y = i * rowH, w = Math.round(barW * r.count / max);
      var g = document.createElementNS(NS, "g");
      g.setAttribute("data-label", r.label);
      g.setAttribute("data-count", String(r.count));
      var label = document.createElementNS(NS, "text");
      label.setAttribute("x", "0"); label.setAttribute("y", String(y + 19));
      label.textContent = r.label;
      var bar = document.createElementNS(NS, "rect");
      bar.setAttribute("x", String(labelW)); bar.setAttribute("y", String(y + 5));
      bar.setAttribute("height", "18");
      bar.setAttribute("width", String(w));
      bar.setAttribute("class", "s-" + r.status);
      var n = document.createElementNS(NS, "text");
      n.setAttribute("x", String(labelW + w + 6)); n.setAttribute("y", String(y + 19));
      n.textContent = String(r.count);
      g.appendChild(label); g.appendChild(bar); g.appendChild(n);
      svg.appendChild(g);
    });
    box.appendChild(svg);
    var table = el("table", null, "figures");
    table.appendChild(el("caption", title));
    var head = el("tr");
    [kind, "addresses", "share"].forEach(function (h) { var th = el("th", h); th.scope = "col"; head.appendChild(th); });
    table.appendChild(el("thead")).appendChild(head);
    var body = el("tbody");
    rows.forEach(function (r) {
      var tr = el("tr");
      var th = el("th", r.label); th.scope = "row"; tr.appendChild(th);
      tr.appendChild(el("td", r.count));
      tr.appendChild(el("td", total ? (100 * r.count / total).toFixed(1) + "%" : "—"));
      body.appendChild(tr);
    });
    table.appendChild(body);
    // Beside the chart on a wide screen, below it on a narrow one; a
    // long label scrolls the table in its box, never the page.
    var wrap = el("div", null, "table-wrap");
    wrap.appendChild(table);
    box.appendChild(wrap);
  }

  // csvCounter counts the records of a CSV stream by (status, reason),
  // the second and third fields of the results' CSV, fed chunk by chunk
  // (quoted fields may hold commas, quotes and line breaks).
  function csvCounter() {
    var counts = {}, field = 0, buf = "", quoted = false, closed = false, header = true, rows = 0;
    var status = "";
    function endField() {
      if (field === 1) { status = buf; }
      if (field === 2 && !header) {
        var k = status + " " + buf;
        counts[k] = (counts[k] || 0) + 1;
        rows++;
      }
      field++; buf = "";
    }
    return {
      feed: function (s) {
        for (var i = 0; i < s.length; i++) {
          var ch = s[i];
          if (quoted) {
            if (ch === "\"") { quoted = false; closed = true; } else if (field <= 2) { buf += ch; }
            continue;
          }
          if (ch === "\"") { if (closed && field <= 2) { buf += ch; } quoted = true; closed = false; continue; }
          closed = false;
          if (ch === ",") { endField(); } else if (ch === "\n") {
            endField(); header = false; field = 0;
          } else if (ch !== "\r" && field <= 2) { buf += ch; }
        }
      },
      rows: function () { return rows; },
      counts: function () { return counts; }
    };
  }

  // resultsCSV resolves with a Response streaming the batch's results as
  // CSV. On AWS a list too long for a reply is an export job (202): the
  // export route shares the job and answers its link, fetched without
  // the key, whereas following the results route's 303 would send the
  // key to S3 (and fail its CORS preflight).
  // layout=results: one row per distinct address, whose second and third
  // fields csvCounter reads (a CSV list's own rows would count its
  // duplicates twice, its verdicts in other columns).
  function resultsCSV() {
    return call("GET", resultsPath("", "layout=results"), undefined, undefined, "text/csv").then(function (res) {
      if (res.status !== 202) { return res; }
      return ready(resultsPath("", "layout=results", "export")).then(function (r) { return r.json(); }).then(function (link) {
        return fetch(link.url, { cache: "no-store", credentials: "omit" })
          .catch(function () { throw { text: "Could not read the results: check the connection and try again." }; })
          .then(function (r) {
            if (!r.ok) { throw { text: "The results link answered " + r.status + "; try again." }; }
            return r;
          });
      });
    });
  }

  // loadReasons reads the batch's results as CSV, a stream the page does
  // not keep, and draws the count of each reason.
  function loadReasons(id) {
    var box = $("breakdown-reasons");
    clear(box);
    $("reasons-state").textContent = "Counting the reasons…";
    var counter = csvCounter(), said = Date.now();
    resultsCSV().then(function (res) {
      var reader = res.body.getReader(), dec = new TextDecoder();
      function next() {
        return reader.read().then(function (part) {
          if (batch === null || batch.id !== id) { return reader.cancel(); }
          if (part.done) { counter.feed(dec.decode()); return show(); }
          counter.feed(dec.decode(part.value, { stream: true }));
          if (Date.now() - said >= 1000) { // a live region, read aloud: once a second at most
            said = Date.now();
            $("reasons-state").textContent = "Counting the reasons: " + counter.rows() + " results read…";
          }
          return next();
        });
      }
      function show() {
        var c = counter.counts();
        var rows = Object.keys(c).map(function (k) {
          var sr = k.split(" ");
          return { label: sr[1], status: sr[0], count: c[k] };
        }).sort(function (a, b) {
          return STATUSES.indexOf(a.status) - STATUSES.indexOf(b.status) || b.count - a.count || (a.label < b.label ? -1 : 1);
        });
        $("reasons-state").textContent = counter.rows() + " results by reason.";
        drawChart(box, "Addresses by reason", "reason", rows);
        reasonChoices(rows);
      }
      return next();
    }).catch(function (err) { $("reasons-state").textContent = ""; fail(err); });
  }

  // resultsPath is the batch's results route (or another of its routes,
  // what) filtered by status, with the extra query.
  function resultsPath(status, extra, what) {
    var q = [];
    if (status) { q.push("status=" + encodeURIComponent(status)); }
    if (extra) { q.push(extra); }
    return "/v1/requests/" + batch.id + "/" + (what || "results") + (q.length ? "?" + q.join("&") : "");
  }

  // loadResults shows the results that pass the filters, 100 rows a
  // page. The API filters by status; reason and flag are filtered here,
  // over pages of 1000, until a page's worth has matched or none are
  // left (a reason implies its status, which the API then filters by).
  // A reply to an older start is dropped, so rows never mix.
  function loadResults(fresh) {
    var tbody = $("results").tBodies[0];
    if (fresh) { clear(tbody); batch.cursor = null; batch.gen = (batch.gen || 0) + 1; }
    var status = $("results-filter").value, reason = $("results-reason").value, flag = $("results-flag").value;
    var local = reason !== "" || flag !== "";
    if (reason) {
      var implied = batch.reasonStatus[reason];
      if (status && status !== implied) { $("results-more").hidden = true; return; }
      status = implied;
    }
    var id = batch.id, gen = batch.gen, shown = 0;
    function page() {
      var extra = "limit=" + (local ? 1000 : 100) + (batch.cursor ? "&cursor=" + encodeURIComponent(batch.cursor) : "");
      return api("GET", resultsPath(status, extra)).then(function (pg) {
        if (!batch || batch.id !== id || batch.gen !== gen) { return; }
        pg.results.forEach(function (r) {
          var d = r.decision || {}, flags = d.flags || {};
          if ((reason && d.reason !== reason) || (flag && !flags[flag])) { return; }
          var tr = el("tr");
          tr.appendChild(el("td", r.email));
          var st = el("td"); st.appendChild(el("span", r.status, "badge s-" + r.status)); tr.appendChild(st);
          tr.appendChild(el("td", d.reason));
          // data-label names a cell where the header is not shown (a
          // phone's cards, console.css).
          var score = el("td", d.score === undefined ? "—" : d.score), fl = el("td", Object.keys(flags).filter(function (f) { return flags[f]; }).join(", "), "words"), sug = el("td", d.suggestion || "");
          score.setAttribute("data-label", "score"); fl.setAttribute("data-label", "flags:"); sug.setAttribute("data-label", "did you mean");
          tr.appendChild(score); tr.appendChild(fl); tr.appendChild(sug);
          tbody.appendChild(tr);
          shown++;
        });
        batch.cursor = pg.nextCursor;
        $("results-more").hidden = !pg.nextCursor;
        if (local && shown < 100 && pg.nextCursor) { return page(); }
      });
    }
    page().catch(fail);
  }

  ["results-filter", "results-reason", "results-flag"].forEach(function (f) {
    $(f).addEventListener("change", function () { loadResults(true); });
  });
  $("results-more").addEventListener("click", function () { loadResults(false); });

  // reasonChoices offers the batch's reasons (from its breakdown) to the
  // reason filter.
  function reasonChoices(rows) {
    var sel = $("results-reason");
    while (sel.options.length > 1) { sel.remove(1); }
    rows.forEach(function (r) {
      batch.reasonStatus[r.label] = r.status;
      sel.add(new Option(r.label + " (" + r.count + ")", r.label));
    });
  }

  // download asks for an export link with the key (waiting while the
  // server writes it: 202), fetches the CSV from it without the key and
  // hands it to the browser as a file. On AWS the link is S3's: the key
  // must never go to another origin, and a GET with no header of ours
  // needs no CORS preflight.
  function download(status, name) {
    showError("");
    ready(resultsPath(status, "", "export")).then(function (res) { return res.json(); }).then(function (link) {
      return fetch(link.url, { cache: "no-store", credentials: "omit" })
        .catch(function () { throw { text: "Could not download the results: check the connection and try again." }; })
        .then(function (res) {
          if (!res.ok) { throw { text: "The download link answered " + res.status + "; try again." }; }
          return res.blob();
        });
    }).then(function (blob) {
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

  // --- past batches ---
  // loadPast shows the account's batches, newest first (GET /v1/requests);
  // fresh starts over at the newest, else the next page is added. A reply
  // to an older fresh start is dropped, so rows never appear twice.
  function loadPast(fresh) {
    if (!key()) { return; }
    if (fresh) { past.gen++; past.cursor = null; }
    var gen = past.gen;
    var q = "/v1/requests?limit=" + PAST_PAGE + (past.cursor ? "&cursor=" + encodeURIComponent(past.cursor) : "");
    api("GET", q).then(function (page) {
      if (gen !== past.gen) { return; }
      var tbody = $("past").tBodies[0];
      if (fresh) { clear(tbody); }
      page.requests.forEach(function (env) { tbody.appendChild(pastRow(env.request, env.counters)); });
      past.cursor = page.nextCursor;
      $("past-more").hidden = !page.nextCursor;
      $("past-empty").textContent = "No batches yet.";
      $("past-empty").hidden = tbody.rows.length > 0;
    }, fail);
  }

  function pastRow(r, c) {
    var tr = el("tr");
    tr.appendChild(el("td", r.name || "—"));
    tr.appendChild(el("td", (r.createdAt || "").replace("T", " ").replace(/\.\d+Z$/, "")));
    tr.appendChild(el("td", r.state));
    tr.appendChild(el("td", r.mode));
    tr.appendChild(el("td", c.processed + " of " + (c.total - c.duplicates)));
    var open = el("td");
    var b = el("button", "Open", "link");
    b.type = "button";
    b.setAttribute("data-id", r.id);
    b.setAttribute("aria-label", "Open the batch " + (r.name ? "“" + r.name + "” " : "") + "of " + r.createdAt + " (" + r.state + ", " + c.total + " addresses)");
    b.addEventListener("click", function () {
      showError("");
      api("GET", "/v1/requests/" + r.id).then(function (env) {
        follow(env);
        $("batch-title").focus(); // keyboard and screen-reader users land on what opened
      }, fail);
    });
    open.appendChild(b);
    tr.appendChild(open);
    return tr;
  }
  $("past-more").addEventListener("click", function () { loadPast(false); });

  // --- how right were the verdicts (GET /v1/outcomes/report) ---
  // Kept apart from the rest: it only reads the report and draws it.
  function reportRate(r) { return r.bounceRate === null ? "—" : (100 * r.bounceRate).toFixed(1) + "%"; }
  function reportLabel(r) { return r.status.replace("_", " ") + (r.scoreBucket ? " " + r.scoreBucket : ""); }

  function loadReport() {
    showError("");
    $("report-state").textContent = "Reading the report…";
    api("GET", "/v1/outcomes/report").then(showReport, function (err) {
      $("report-state").textContent = "";
      fail(err);
    });
  }

  function showReport(rep) {
    var body = $("report-table").tBodies[0];
    clear(body);
    rep.rows.forEach(function (r) {
      var tr = el("tr");
      var th = el("th", r.status.replace("_", " ")); th.scope = "row"; tr.appendChild(th);
      [r.scoreBucket || "—", r.sent, r.delivered, r.hardBounces, r.softBounces, r.complaints, r.deferrals, reportRate(r)]
        .forEach(function (v) { tr.appendChild(el("td", String(v))); });
      body.appendChild(tr);
    });
    drawCalibration($("report-chart"), rep.rows.filter(function (r) { return r.bounceRate !== null; }));
    $("report-state").textContent = rep.outcomes === 0 ? "No outcomes reported yet." :
      rep.outcomes + " outcome" + (rep.outcomes === 1 ? "" : "s") + " reported.";
    $("report").hidden = rep.outcomes === 0;
  }

  // drawCalibration plots the hard-bounce rate of each row with mail
  // sent: a verdict that is right bounces rarely when it says
  // deliverable or scores high. The table says the same in figures.
  function drawCalibration(box, rows) {
    var NS = "http://www.w3.org/2000/svg";
    clear(box);
    var rowH = 28, labelW = 190, barW = 240, width = labelW + barW + 70;
    var svg = document.createElementNS(NS, "svg");
    svg.setAttribute("viewBox", "0 0 " + width + " " + (rowH * Math.max(rows.length, 1)));
    svg.setAttribute("width", String(width));
    svg.setAttribute("role", "img");
    var summary = "Bounce rate by verdict: " + rows.map(function (r) { return reportLabel(r) + " " + reportRate(r); }).join(", ");
    svg.setAttribute("aria-label", summary);
    var t = document.createElementNS(NS, "title");
    t.textContent = summary;
    svg.appendChild(t);
    rows.forEach(function (r, i) {
      var y = i * rowH, w = Math.round(barW * r.bounceRate);
      var g = document.createElementNS(NS, "g");
      g.setAttribute("data-label", reportLabel(r));
      g.setAttribute("data-rate", reportRate(r));
      var label = document.createElementNS(NS, "text");
      label.setAttribute("x", "0"); label.setAttribute("y", String(y + 19));
      label.textContent = reportLabel(r);
      var bar = document.createElementNS(NS, "rect");
      bar.setAttribute("x", String(labelW)); bar.setAttribute("y", String(y + 5));
      bar.setAttribute("height", "18");
      bar.setAttribute("width", String(w));
      bar.setAttribute("class", "s-" + (r.status === "not_verified" ? "unknown" : r.status));
      var n = document.createElementNS(NS, "text");
      n.setAttribute("x", String(labelW + w + 6)); n.setAttribute("y", String(y + 19));
      n.textContent = reportRate(r);
      g.appendChild(label); g.appendChild(bar); g.appendChild(n);
      svg.appendChild(g);
    });
    box.appendChild(svg);
  }
  $("report-load").addEventListener("click", loadReport);

  // --- egress: are we blocked? (for operators) ---
  // The egress object of /readyz's body (docs/operations.md, "Knowing when
  // we are blocked"): public on `evs serve`, no key and no account data,
  // so it is read without the key. Read when asked, never at load: on AWS
  // nothing answers /readyz (the stack's alarms say it there).
  var EGRESS_NONE = "This deployment does not serve /readyz: on AWS the self-check's findings are the metrics and alarms EgressListedAlarm and EgressHeloAlarm (docs/aws.md).";

  function loadEgress() {
    var state = $("egress-state");
    state.textContent = "Reading /readyz…";
    fetch("../readyz", { cache: "no-store", credentials: "omit", headers: { "Accept": "application/json" } })
      .then(function (res) {
        // 503 (draining, a full disk) still carries the egress object.
        return res.json().catch(function () { return null; });
      }, function () { return null; })
      .then(function (body) {
        var box = $("egress");
        clear(box);
        if (!body || !body.egress) { state.textContent = EGRESS_NONE; return; }
        var e = body.egress;
        // With SOCKS exits, each has its own state and self-check; the
        // object itself is every verdict together.
        var units = e.exits && e.exits.length ? e.exits : [e];
        units.forEach(function (u) { box.appendChild(egressCard(u, !!e.exits)); });
        var listed = units.filter(function (u) { return egressListed(u).length > 0; }).length;
        var helo = units.filter(function (u) { return u.helo && !u.helo.ok; }).length;
        state.textContent = "Read " + new Date().toISOString().replace("T", " ").replace(/\.\d+Z$/, "") + " UTC (server " + body.status + "): " +
          units.length + (units.length === 1 ? " egress" : " egresses") + ", " +
          (listed ? listed + " listed on a blocklist" : "none listed") + ", " +
          (helo ? helo + " failing the HELO check" : "HELO check passed or not run") + ".";
      });
  }

  function egressListed(u) { return (u.blocklists || []).filter(function (l) { return l.listed; }); }

  function utc(t) { return t ? t.replace("T", " ").replace(/\.\d+Z$/, "").replace(/Z$/, "") + " UTC" : ""; }

  // egressCard shows one egress (the direct one, or a SOCKS exit): its
  // state, its self-check, and its blocked share per provider.
  function egressCard(u, isExit) {
    var card = el("article", undefined, "egress");
    card.setAttribute("data-egress", u.name);
    var listed = egressListed(u);
    var bad = listed.length > 0 || (u.helo && !u.helo.ok) || (isExit && !u.up);
    if (bad) { card.classList.add("egress-bad"); }
    var h = el("h3", u.name);
    var word = isExit ? (u.up ? "in rotation" : "out of rotation") : "direct";
    var tag = el("span", word, "badge " + (isExit && !u.up ? "s-undeliverable" : "s-deliverable"));
    tag.setAttribute("data-state", word);
    h.appendChild(document.createTextNode(" "));
    h.appendChild(tag);
    card.appendChild(h);
    var dl = el("dl", undefined, "facts");
    function fact(name, value, cls) {
      dl.appendChild(el("dt", name));
      var dd = el("dd", value, cls);
      dl.appendChild(dd);
      return dd;
    }
    if (isExit && (u.since || u.detail)) {
      fact("State", (u.up ? "In rotation" : "Out of rotation") + (u.since ? " since " + utc(u.since) : "") + (u.detail ? ": " + u.detail : ""));
    }
    fact("Address", u.address || "not known" + (u.note ? " (" + u.note + ")" : ""));
    var lists = (u.blocklists || []).map(function (l) {
      if (l.error) { return l.zone + ": no answer (" + l.error + ")"; }
      return l.zone + ": " + (l.listed ? "LISTED" + (l.codes && l.codes.length ? " (" + l.codes.join(", ") + ")" : "") : "not listed");
    });
    fact("Blocklists", lists.length ? lists.join("; ") : "not checked", listed.length ? "egress-listed" : "")
      .setAttribute("data-listed", listed.map(function (l) { return l.zone; }).join(","));
    if (u.helo) {
      fact("HELO name", u.helo.name + ": " + (u.helo.ok ? "forward-confirmed reverse DNS OK" : "FAILS — " + u.helo.detail), u.helo.ok ? "" : "egress-listed")
        .setAttribute("data-helo", u.helo.ok ? "ok" : "failed");
    }
    fact("Checked", u.checkedAt ? utc(u.checkedAt) : "not yet");
    if (isExit) {
      // A listed exit is avoided for every provider (docs/operations.md);
      // avoided names those whose refusals of us avoid it besides.
      var by = u.avoided && u.avoided.length ? u.avoided.join(", ") : "";
      fact("Avoided for", listed.length ? "every provider while another exit is not listed" + (by ? ", and for " + by : "") : by || "no provider");
    }
    card.appendChild(dl);
    var blocked = u.blocked || [];
    if (!blocked.length) {
      card.appendChild(el("p", "No live verdict with an SMTP reply in the last 15 minutes.", "hint"));
      return card;
    }
    var wrap = el("div", undefined, "table-wrap");
    var t = el("table", undefined, "figures egress-blocked");
    t.appendChild(el("caption", "Refusals of us per provider, last 15 minutes"));
    var head = el("tr");
    ["Provider", "Answered", "Blocked", "Share"].forEach(function (c) {
      var th = el("th", c);
      th.scope = "col";
      head.appendChild(th);
    });
    t.appendChild(el("thead")).appendChild(head);
    var body = t.appendChild(el("tbody"));
    blocked.forEach(function (b) {
      var tr = el("tr");
      var th = el("th", b.provider);
      th.scope = "row";
      tr.appendChild(th);
      tr.appendChild(el("td", b.answered));
      tr.appendChild(el("td", b.blocked));
      tr.appendChild(el("td", Math.round(b.share * 100) + "%"));
      tr.setAttribute("data-provider", b.provider);
      tr.setAttribute("data-share", String(b.share));
      body.appendChild(tr);
    });
    wrap.appendChild(t);
    card.appendChild(wrap);
    return card;
  }
  $("egress-load").addEventListener("click", loadEgress);

  showKeyState();
  showFileName();
  loadPast(true);
})();
