// errand's live task page: new log lines arrive as server-sent events and are appended;
// the header, panel and memories are redrawn by the server when the task moves.
// EventSource resends the last event id when it reconnects, so no line is lost.
(function () {
  "use strict";
  let source = null;
  let watched = null;
  // The panel refresh: at most one request in flight, and a refresh asked for while one is
  // in flight runs after it, so the last change is always drawn (an answer given while the
  // panel was loading "running" must not leave it there).
  let inflight = false;
  let again = false;
  let timer = null;
  let latestState = null;

  function refresh() {
    const panel = document.getElementById("panel");
    if (!panel || !window.htmx || !panel.dataset.refresh) return;
    if (inflight) { again = true; return; }
    inflight = true;
    window.htmx.ajax("GET", panel.dataset.refresh, { target: "#panel", swap: "outerHTML" }).finally(function () {
      inflight = false;
      const shown = document.getElementById("panel");
      if (again || (latestState && shown && shown.dataset.panelState !== latestState)) {
        again = false;
        soon(250);
      }
    });
  }

  function soon(delay) {  // several events in a burst make one refresh
    if (timer) return;
    timer = setTimeout(function () { timer = null; refresh(); }, delay);
  }

  function localTimes(root) {
    root.querySelectorAll("time[data-t]").forEach(function (element) {
      const when = new Date(Number(element.dataset.t) * 1000);
      element.textContent = when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
      element.title = when.toLocaleString();
      element.removeAttribute("data-t");
    });
  }

  function span(seconds) {
    const whole = Math.floor(seconds);
    if (whole < 60) return (seconds < 10 ? seconds.toFixed(1) : String(whole)) + "s";
    if (whole < 3600) return Math.floor(whole / 60) + "m " + String(whole % 60).padStart(2, "0") + "s";
    return Math.floor(whole / 3600) + "h " + String(Math.floor(whole % 3600 / 60)).padStart(2, "0") + "m";
  }

  function tick() {  // elapsed time keeps counting between events
    document.querySelectorAll("time[data-since]:not([data-until])").forEach(function (element) {
      element.textContent = span(Date.now() / 1000 - Number(element.dataset.since));
    });
  }

  function connect() {
    localTimes(document);
    const log = document.querySelector("[data-live]");
    if (log === watched) return;
    if (source) source.close();  // a new page (htmx swapped the body): follow its log instead
    source = null;
    watched = log;
    latestState = null;
    again = false;  // the last page's refreshes are not this one's
    if (timer) { clearTimeout(timer); timer = null; }
    if (!log) return;
    source = new EventSource(log.dataset.live + "?after=" + encodeURIComponent(log.dataset.after || "0"));
    source.addEventListener("log", function (event) {
      const stick = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
      log.insertAdjacentHTML("beforeend", event.data);
      const line = log.lastElementChild;  // the log shows one attempt: so do its new lines
      if (log.dataset.show && line && line.dataset.attempt && line.dataset.attempt !== log.dataset.show) line.remove();
      localTimes(log);
      log.dataset.after = event.lastEventId;
      if (stick) window.scrollTo(0, document.body.scrollHeight);
      soon(1000);  // tokens, cost, memories used
    });
    source.addEventListener("skip", function (event) { log.dataset.after = event.lastEventId; soon(1000); });
    source.addEventListener("state", function (event) {
      latestState = event.data;
      const panel = document.getElementById("panel");
      if (panel && panel.dataset.panelState !== event.data) refresh();
    });
  }

  setInterval(tick, 1000);
  document.addEventListener("DOMContentLoaded", connect);
  document.addEventListener("htmx:load", connect);
  document.addEventListener("htmx:afterSettle", connect);
  // A response that comes back after its page was left (a panel refresh in flight when the person
  // followed a link) is dropped: swapped, its header and memories found no place on the new page.
  // (Not on htmx:beforeSwap: that is fired on the target, and a target off the page tells no one.)
  document.addEventListener("htmx:beforeOnLoad", function (event) {
    if (event.detail.target && !event.detail.target.isConnected) event.preventDefault();
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    const form = event.detail.elt;
    if (event.detail.successful && form instanceof HTMLFormElement && form.hasAttribute("data-reset")) form.reset();
  });
})();
