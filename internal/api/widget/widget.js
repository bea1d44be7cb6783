/*! evs sign-up widget (docs/widget.md): checks email fields with a
 * publishable key. No framework, no third-party code, no inline style. */
(function () {
  "use strict";
  var script = document.currentScript;
  if (!script || !window.fetch || !window.AbortController || !window.WeakMap) { return; }
  var attr = function (n) { return script.getAttribute("data-" + n); };
  var key = attr("key") || "";
  // A secret key in a page hands out the whole account: never send one.
  if (key.indexOf("evs_pk.") !== 0) {
    console.warn("evs widget: data-key must be a publishable key (evs_pk.…); the widget is off.");
    return;
  }
  var num = function (v, def, lo, hi) {
    var n = parseInt(v, 10);
    return isNaN(n) ? def : Math.min(hi, Math.max(lo, n));
  };
  // The API is where this script came from: relative to its URL, so that
  // a path prefix (an API Gateway stage) is kept and ?v= is dropped.
  var endpoint = new URL("v1/verify", script.src).href;
  var selector = attr("selector") || "input[type=email]";
  var timeoutMs = num(attr("timeout-ms"), 3000, 100, 60000);
  var debounceMs = num(attr("debounce-ms"), 800, 0, 10000);
  var mode = attr("mode") === "quick" ? "quick" : "full";
  var block = (attr("block") || "").toLowerCase().split(/[\s,]+/);
  var msgs = {
    undeliverable: attr("msg-undeliverable") || "This address cannot receive email.",
    invalid_syntax: attr("msg-undeliverable") || "This is not a valid email address.",
    invalid_domain: attr("msg-undeliverable") || "This email domain does not exist.",
    no_mail_server: attr("msg-undeliverable") || "This domain does not receive email.",
    disposable: attr("msg-disposable") || "Please use a permanent address, not a disposable one.",
    suggest: attr("msg-suggest") || "Did you mean"
  };
  var states = new WeakMap();
  var cache = new Map(); // address → reply, so that a blur after a check costs no call
  var ids = 0;
  var FULL = /^[^\s@]+@[^\s@.]+(\.[^\s@.]+)+$/; // worth a call while typing

  function ours(el) {
    return el && el.tagName === "INPUT" && el.matches(selector);
  }

  function state(input) {
    var s = states.get(input);
    if (!s) {
      s = { value: null, done: false, retry: false, pending: null, ctl: null, timer: 0, msg: null };
      states.set(input, s);
    }
    return s;
  }

  // message is the field's aria-live element: the page's own (the id in
  // data-evs-message) or one made after the field, named by
  // aria-describedby so that a screen reader reads it with the field.
  function message(input, s) {
    if (s.msg) { return s.msg; }
    var m = document.getElementById(input.getAttribute("data-evs-message") || "");
    if (!m) {
      m = document.createElement("span");
      m.className = "evs-message";
      m.id = "evs-message-" + (++ids);
      input.insertAdjacentElement("afterend", m);
    }
    m.setAttribute("aria-live", "polite");
    var by = (input.getAttribute("aria-describedby") || "").split(/\s+/).filter(Boolean);
    if (by.indexOf(m.id) < 0) { by.push(m.id); }
    input.setAttribute("aria-describedby", by.join(" "));
    s.msg = m;
    return m;
  }

  // mark shows the field's state: data-evs-status (checking, a status,
  // or error) for the page's CSS, aria-invalid, the message, and the
  // custom validity that blocks submission only when the page asked.
  function mark(input, s, status, text, suggestion, blocked) {
    if (status) { input.setAttribute("data-evs-status", status); } else { input.removeAttribute("data-evs-status"); }
    if (text) { input.setAttribute("aria-invalid", "true"); } else { input.removeAttribute("aria-invalid"); }
    input.setCustomValidity(blocked ? text : "");
    var m = s.msg;
    if (!m) { return; }
    m.textContent = text ? text + (suggestion ? " " : "") : "";
    if (suggestion) {
      m.appendChild(document.createTextNode(msgs.suggest + " "));
      var b = document.createElement("button");
      b.type = "button";
      b.className = "evs-suggestion";
      b.textContent = suggestion;
      b.addEventListener("click", function () {
        input.value = suggestion;
        // Frameworks that watch the field see the change as typing.
        input.dispatchEvent(new Event("input", { bubbles: true }));
        input.dispatchEvent(new Event("change", { bubbles: true }));
        input.focus();
        check(input);
      });
      m.appendChild(b);
      m.appendChild(document.createTextNode("?"));
    }
  }

  function emit(input, name, detail) {
    return input.dispatchEvent(new CustomEvent(name, { bubbles: true, cancelable: true, detail: detail }));
  }

  function problem(v) {
    if (v.status === "undeliverable") { return msgs[v.reason] || msgs.undeliverable; }
    if (v.reason === "disposable" || (v.flags && v.flags.disposable)) { return msgs.disposable; }
    return "";
  }

  function blocks(v) {
    if (v.status === "undeliverable") { return block.indexOf("undeliverable") >= 0; }
    return problem(v) !== "" && block.indexOf("disposable") >= 0;
  }

  // show renders a verdict unless a listener of evs:verdict cancelled it
  // to render its own.
  function show(input, s, email, v, ms) {
    s.done = true;
    var blocked = blocks(v);
    var detail = { email: email, status: v.status, reason: v.reason, score: v.score, suggestion: v.suggestion,
      flags: v.flags, requestId: v.requestId, blocked: blocked, ms: ms };
    if (!emit(input, "evs:verdict", detail)) { mark(input, s, v.status, "", null, false); return; }
    mark(input, s, v.status, problem(v), v.suggestion, blocked);
  }

  // fail leaves the field free: the service being slow or down never
  // blocks a form.
  function fail(input, s, email, error, status, code) {
    s.done = true;
    // A check that ran out of time may be answered at once later (the
    // service keeps verdicts): the next blur asks again; a submit does not.
    s.retry = error === "timeout";
    mark(input, s, "error", "", null, false);
    emit(input, "evs:error", { email: email, error: error, status: status, code: code });
  }

  // check verifies the field's value unless it is the one already checked
  // or being checked; it returns the pending check, if any.
  function check(input, typing) {
    var s = state(input);
    var email = input.value.trim();
    clearTimeout(s.timer);
    if (email === s.value && (s.pending || s.done)) { return s.pending; }
    s.retry = false;
    if (s.ctl) { s.ctl.abort(); }
    s.value = email;
    s.done = false;
    s.pending = s.ctl = null;
    if (email.indexOf("@") < 1 || email.length > 512 || (typing && !FULL.test(email))) {
      s.value = null;
      mark(input, s, "", "", null, false);
      return null;
    }
    // The live region is there, empty, before its first words: screen
    // readers announce changes to a region, not a region that appears.
    message(input, s);
    if (cache.has(email)) { show(input, s, email, cache.get(email), 0); return null; }
    var ctl = new AbortController();
    var late = false;
    var timer = setTimeout(function () { late = true; ctl.abort(); }, timeoutMs);
    var t0 = Date.now();
    s.ctl = ctl;
    mark(input, s, "checking", "", null, false);
    s.pending = fetch(endpoint, {
      method: "POST", mode: "cors", credentials: "omit", cache: "no-store", signal: ctl.signal,
      headers: { "Content-Type": "application/json", "X-Api-Key": key },
      body: JSON.stringify({ email: email, mode: mode })
    }).then(function (res) {
      return res.json().then(function (v) {
        if (!res.ok) { throw { status: res.status, code: v && v.error && v.error.code }; }
        return v;
      }, function () { throw { status: res.status }; });
    }).then(function (v) {
      if (cache.size > 100) { cache.clear(); }
      cache.set(email, v);
      if (s.ctl === ctl) { show(input, s, email, v, Date.now() - t0); }
    }, function (err) {
      if (s.ctl !== ctl) { return; } // another value took its place
      if (late) { fail(input, s, email, "timeout"); } else if (err && err.status) { fail(input, s, email, "http", err.status, err.code); } else { fail(input, s, email, "network"); }
    }).then(function () {
      clearTimeout(timer);
      if (s.ctl === ctl) { s.ctl = s.pending = null; }
    });
    return s.pending;
  }

  document.addEventListener("focusout", function (e) {
    if (!ours(e.target)) { return; }
    var s = state(e.target);
    if (s.retry) { s.value = null; }
    check(e.target);
  }, true);

  document.addEventListener("input", function (e) {
    var input = e.target;
    if (!ours(input)) { return; }
    var s = state(input);
    if (input.value.trim() === s.value) { return; }
    // What was said of the old value is no longer true of the new.
    if (s.ctl) { s.ctl.abort(); s.ctl = s.pending = null; }
    s.value = null;
    mark(input, s, "", "", null, false);
    clearTimeout(s.timer);
    s.timer = setTimeout(function () { check(input, true); }, debounceMs);
  }, true);

  // A page that blocks on a verdict gets it before its form goes: a
  // submit while a field's check runs is held (the page's own submit
  // listeners too) until the verdict or the time-out, then made again.
  document.addEventListener("submit", function (e) {
    var form = e.target;
    if (block.join("") === "" || !form.querySelectorAll) { return; }
    var waits = Array.prototype.filter.call(form.querySelectorAll(selector), ours)
      .map(function (input) { return check(input); }).filter(Boolean);
    if (!waits.length) { return; }
    e.preventDefault();
    e.stopImmediatePropagation();
    var by = e.submitter;
    Promise.all(waits).then(function () {
      if (form.requestSubmit) { form.requestSubmit(by && by.form === form ? by : undefined); } else { form.submit(); }
    });
  }, true);

  script.setAttribute("data-evs-ready", "");
})();
