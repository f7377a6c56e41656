// errand's live task log: new lines arrive as server-sent events and are appended.
// EventSource resends the last event id when it reconnects, so no line is lost.
(function () {
  "use strict";
  let source = null;
  let watched = null;

  function connect() {
    const log = document.querySelector("[data-live]");
    if (log === watched) return;
    if (source) source.close();  // a new page (htmx swapped the body): follow its log instead
    source = null;
    watched = log;
    if (!log) return;
    source = new EventSource(log.dataset.live + "?after=" + encodeURIComponent(log.dataset.after || "0"));
    source.addEventListener("log", function (event) {
      const stick = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
      log.insertAdjacentHTML("beforeend", event.data);
      log.dataset.after = event.lastEventId;
      if (stick) window.scrollTo(0, document.body.scrollHeight);
    });
    source.addEventListener("skip", function (event) { log.dataset.after = event.lastEventId; });
    source.addEventListener("state", function (event) {
      const panel = document.getElementById("panel");
      const shown = panel && panel.querySelector("[data-state]");
      if (panel && window.htmx && (!shown || shown.dataset.state !== event.data)) window.htmx.trigger(panel, "refresh");
    });
  }

  document.addEventListener("DOMContentLoaded", connect);
  document.addEventListener("htmx:load", connect);
  document.addEventListener("htmx:afterSettle", connect);
  document.addEventListener("htmx:afterRequest", function (event) {
    const form = event.detail.elt;
    if (event.detail.successful && form instanceof HTMLFormElement && form.hasAttribute("data-reset")) form.reset();
  });
})();
