// errand's review page, read as a pull request's "Files changed": unified or side by side
// (remembered), more of a file's base around a hunk, files marked viewed (remembered per
// change), keyboard moves, and comments on lines kept in this browser until they are sent
// as one follow-up. The page works without it; this adds to what the server drew.
(function () {
  "use strict";
  const STEP = 20;  // lines one "show more" adds
  const LAYOUT_KEY = "errand.layout";

  function load(key, fallback) {
    try {
      const value = window.localStorage.getItem(key);
      return value === null ? fallback : JSON.parse(value);
    } catch (error) {
      return fallback;  // storage off, or a value this page did not write
    }
  }

  function save(key, value) {
    try { window.localStorage.setItem(key, JSON.stringify(value)); } catch (error) { /* storage full or off */ }
  }

  function make(tag, attributes, text) {
    const element = document.createElement(tag);
    Object.entries(attributes || {}).forEach(function ([name, value]) { element.setAttribute(name, value); });
    if (text !== undefined) element.textContent = text;
    return element;
  }

  function filesOf(root) { return Array.from(root.querySelectorAll("details.file")); }
  function unifiedOf(file) { return file.querySelector("table.unified"); }
  function splitOf(file) { return file.querySelector("table.split"); }
  function shownTable(file) { return file.querySelector("table.diff:not([hidden])"); }
  function rowsOf(table) { return table ? Array.from(table.tBodies[0].rows) : []; }
  function kind(row) { return ["hunk", "context", "add", "del", "note"].find(function (k) { return row.classList.contains(k); }); }

  // ---------------------------------------------------------------- side by side

  function cellPair(row, side) {
    if (!row) return [make("td", { class: "num empty" }), make("td", { class: "text empty" })];
    const number = row.cells[side === "old" ? 0 : 1].cloneNode(true);
    const text = row.cells[2].cloneNode(true);
    number.classList.add(kind(row));
    text.classList.add(kind(row));
    return [number, text];
  }

  function splitRow(left, right) {
    const row = make("tr");
    row.append(...cellPair(left, "old"), ...cellPair(right, "new"));
    return row;
  }

  function buildSplit(file) {
    const unified = unifiedOf(file);
    if (!unified) return;
    let split = splitOf(file);
    if (!split) {
      split = make("table", { class: "diff code split" });
      split.hidden = true;
      unified.after(split);
    }
    const columns = make("colgroup");
    ["num", "text", "num", "text"].forEach(function (name) { columns.append(make("col", { class: name })); });
    const body = make("tbody");
    const rows = rowsOf(unified).filter(function (row) { return kind(row); });
    for (let index = 0; index < rows.length;) {
      const row = rows[index];
      if (row.classList.contains("del") || row.classList.contains("add")) {
        const removed = [];
        const added = [];
        while (index < rows.length && rows[index].classList.contains("del")) removed.push(rows[index++]);
        while (index < rows.length && rows[index].classList.contains("add")) added.push(rows[index++]);
        for (let n = 0; n < Math.max(removed.length, added.length); n++) body.append(splitRow(removed[n], added[n]));
        continue;
      }
      if (row.classList.contains("context")) {
        body.append(splitRow(row, row));
      } else {  // a hunk's header or a note: one cell across
        const whole = row.cloneNode(false);
        const cell = make("td", { colspan: "4" });
        cell.innerHTML = row.cells[row.cells.length - 1].innerHTML;
        whole.append(cell);
        body.append(whole);
      }
      index++;
    }
    const more = unified.querySelector("tr.expand-end");
    if (more) {
      const copy = more.cloneNode(true);
      copy.cells[0].colSpan = 4;
      body.append(copy);
    }
    const caption = unified.caption ? unified.caption.cloneNode(true) : null;
    split.replaceChildren(...(caption ? [caption] : []), columns, body);
  }

  function setLayout(root, layout) {
    save(LAYOUT_KEY, layout);
    selection = null;
    root.dataset.shown = layout;
    filesOf(root).forEach(function (file) {
      if (!unifiedOf(file)) return;
      if (layout === "split") buildSplit(file);
      unifiedOf(file).hidden = layout === "split";
      if (splitOf(file)) splitOf(file).hidden = layout !== "split";
      drawComments(root, file);
    });
    root.querySelectorAll("button[data-layout]").forEach(function (button) {
      button.setAttribute("aria-pressed", String(button.dataset.layout === layout));
    });
    const columns = root.closest(".columns");
    if (columns) columns.classList.toggle("split-layout", layout === "split");
    drawSelection(root);
  }

  // ---------------------------------------------------------------- more of the file

  // The stretches of the base a file's diff leaves out: above each hunk, and after the last.
  // Lines shown above a hunk go right under its header, so each gap stays just above one header.
  function gaps(file) {
    const found = [];
    let nextOld = 1;
    let nextNew = 1;
    const rows = rowsOf(unifiedOf(file));
    rows.forEach(function (row, index) {
      const old = Number(row.cells[0] && row.cells[0].dataset.line);
      const neu = Number(row.cells[1] && row.cells[1].dataset.line);
      if (row.classList.contains("hunk")) {
        const next = rows[index + 1];
        const shown = next && next.classList.contains("expanded");
        const first = shown ? Number(next.cells[0].dataset.line) : Number(row.dataset.old);
        const firstNew = shown ? Number(next.cells[1].dataset.line) : Number(row.dataset.new);
        found.push({ row: row, start: nextOld, end: first - 1, offset: firstNew - first });
        nextOld = first;
        nextNew = firstNew;
      } else if (row.classList.contains("context")) {
        nextOld = old + 1;
        nextNew = neu + 1;
      } else if (row.classList.contains("del")) {
        nextOld = old + 1;
      } else if (row.classList.contains("add")) {
        nextNew = neu + 1;
      }
    });
    found.push({ row: null, start: nextOld, end: Infinity, offset: nextNew - nextOld });
    return found;
  }

  function drawExpanders(root, file) {
    const table = unifiedOf(file);
    if (!file.hasAttribute("data-expandable") || !table) return;
    table.querySelectorAll("button.expand").forEach(function (button) { button.remove(); });
    gaps(file).forEach(function (gap, index) {
      if (gap.end < gap.start) return;
      const label = gap.row ? "Show more lines above" : "Show more lines below";
      const button = make("button", { type: "button", class: "expand", "data-gap": String(index),
                                      "aria-label": label + " (" + file.dataset.path + ")" },
                          gap.row ? "↑ more above" : "↓ more below");
      if (gap.row) {
        gap.row.cells[0].prepend(button);
      } else if (!file.dataset.ended) {
        let last = table.querySelector("tr.expand-end");
        if (!last) {
          last = make("tr", { class: "expand-end" });
          last.append(make("td", { colspan: "3" }));
          table.tBodies[0].append(last);
        }
        last.cells[0].replaceChildren(button);
      }
    });
    if (file.dataset.ended) table.querySelectorAll("tr.expand-end").forEach(function (row) { row.remove(); });
    if (splitOf(file)) buildSplit(file);
  }

  function contextRow(line, offset) {
    const row = make("tr", { class: "context expanded" });
    const old = make("td", { class: "num", "data-side": "old", "data-line": String(line.old) }, String(line.old));
    const neu = make("td", { class: "num", "data-side": "new", "data-line": String(line.old + offset) },
                     String(line.old + offset));
    const text = make("td", { class: "text" });
    text.innerHTML = line.html;  // the server's highlighting of the base's line, escaped there
    row.append(old, neu, text);
    return row;
  }

  async function expand(root, file, index, button) {
    const gap = gaps(file)[index];
    if (!gap || gap.end < gap.start) return;
    const start = gap.row ? Math.max(gap.start, gap.end - STEP + 1) : gap.start;
    const end = gap.row ? gap.end : gap.start + STEP - 1;
    const query = new URLSearchParams({ path: file.dataset.basePath, start: String(start), end: String(end),
                                        attempt: root.dataset.attempt });
    button.disabled = true;
    let answer;
    try {
      const response = await fetch(root.dataset.context + "?" + query, { headers: { Accept: "application/json" } });
      answer = await response.json();
      if (!response.ok) throw new Error(answer.detail || response.statusText);
    } catch (error) {
      button.disabled = false;
      button.textContent = "could not load: " + error.message;
      return;
    }
    const rows = answer.lines.map(function (line) { return contextRow(line, gap.offset); });
    if (gap.row) {
      gap.row.after(...rows);
    } else {
      const last = unifiedOf(file).querySelector("tr.expand-end");
      last.before(...rows);
      if (end >= answer.total) file.dataset.ended = "1";
    }
    drawExpanders(root, file);
    drawComments(root, file);
  }

  // ---------------------------------------------------------------- files drawn when opened

  // A closed file (deleted, generated, large) or one past the page's line budget comes without
  // its diff; opening it fetches that file alone, drawn by the server as the page draws the rest.
  async function loadFile(root, file) {
    const url = file.dataset.load;
    if (!url || file.dataset.loading) return;
    file.dataset.loading = "1";
    const notice = file.querySelector(".load-diff");
    let html;
    try {
      const response = await fetch(url, { headers: { Accept: "text/html" }, credentials: "same-origin" });
      html = await response.text();
      if (!response.ok) throw new Error(response.status + " " + response.statusText);
    } catch (error) {
      delete file.dataset.loading;
      if (notice) notice.textContent = "Could not load this file's diff (" + error.message + "); close and open it to try again.";
      return;
    }
    const holder = document.createElement("div");
    holder.innerHTML = html;  // the server's drawing of this file, escaped there as the page is
    if (notice) notice.replaceWith(...holder.childNodes); else file.append(...holder.childNodes);
    delete file.dataset.load;
    delete file.dataset.loading;
    drawExpanders(root, file);
    if (root.dataset.shown === "split" && unifiedOf(file)) {
      buildSplit(file);
      unifiedOf(file).hidden = true;
      splitOf(file).hidden = false;
    }
    drawComments(root, file);
  }

  // ---------------------------------------------------------------- viewed

  function viewedKey(root) { return "errand.viewed." + root.dataset.task; }

  function markViewed(root, file, viewed) {
    const marks = load(viewedKey(root), {});
    if (viewed) marks[file.dataset.path] = file.dataset.digest; else delete marks[file.dataset.path];
    save(viewedKey(root), marks);
    showViewed(root, file, viewed);
    file.open = !viewed;
  }

  function showViewed(root, file, viewed) {
    file.classList.toggle("viewed", viewed);
    const box = file.querySelector("input[data-viewed]");
    if (box) box.checked = viewed;
    const entry = root.querySelector('.tree-file[data-file="' + file.id + '"]');
    if (entry) entry.classList.toggle("viewed", viewed);
    const files = filesOf(root);
    const count = files.filter(function (f) { return f.classList.contains("viewed"); }).length;
    const summary = root.querySelector(".tree-box > summary");
    const total = Number(root.dataset.files) || files.length;  // a page may list only some of them
    if (summary) summary.textContent = "Files changed (" + total + ")" + (count ? ", " + count + " viewed" : "");
  }

  // ---------------------------------------------------------------- keyboard

  let current = -1;

  function setCurrent(root, index) {
    const files = filesOf(root);
    if (!files.length) return;
    current = Math.max(0, Math.min(files.length - 1, index));
    files.forEach(function (file, n) { file.classList.toggle("current", n === current); });
    root.querySelectorAll(".tree-file").forEach(function (entry) {
      entry.classList.toggle("current", entry.dataset.file === files[current].id);
    });
    return files[current];
  }

  function moveFile(root, step) {
    const file = setCurrent(root, current + step);
    if (!file) return;
    file.scrollIntoView({ block: "start" });
    file.querySelector("summary").focus({ preventScroll: true });
  }

  function moveHunk(root, step) {
    const hunks = Array.from(root.querySelectorAll("details.file[open] table.diff:not([hidden]) tr.hunk"));
    const tops = hunks.map(function (row) { return row.getBoundingClientRect().top; });
    const target = step > 0 ? hunks.find(function (row, n) { return tops[n] > 4; })
      : hunks.filter(function (row, n) { return tops[n] < -4; }).pop();
    if (!target) return;
    const file = target.closest("details.file");
    setCurrent(root, filesOf(root).indexOf(file));
    target.scrollIntoView({ block: "start" });
  }

  function onKey(event) {
    const root = document.querySelector("[data-review][data-ready]");
    if (!root || event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.target instanceof Element && event.target.closest("input, textarea, select, [contenteditable], dialog")) return;
    const help = root.querySelector("dialog.keys-help");
    const files = filesOf(root);
    if (event.key === "j") moveFile(root, 1);
    else if (event.key === "k") moveFile(root, -1);
    else if (event.key === "n") moveHunk(root, 1);
    else if (event.key === "p") moveHunk(root, -1);
    else if (event.key === "v" && files[current]) markViewed(root, files[current], !files[current].classList.contains("viewed"));
    else if (event.key === "s") setLayout(root, root.dataset.shown === "split" ? "unified" : "split");
    else if (event.key === "?" && help) help.showModal();
    else return;
    event.preventDefault();
  }

  // ---------------------------------------------------------------- line comments

  let selection = null;  // {file, side, anchor, start, end}

  // Kept per attempt of a round: a comment is about the lines of the diff it was made on.
  function commentsKey(root) {
    return "errand.comments." + root.dataset.task + ".r" + root.dataset.round + ".a" + root.dataset.attempt;
  }

  function forgetComments(root) {  // sent: that round is over, and so are its attempts' unsent comments
    const prefix = "errand.comments." + root.dataset.task + ".";
    try {
      Object.keys(window.localStorage).filter(function (key) { return key.startsWith(prefix); })
        .forEach(function (key) { window.localStorage.removeItem(key); });
    } catch (error) { /* storage off */ }
  }
  function comments(root) { return load(commentsKey(root), []); }

  function lines(start, end) { return start === end ? "line " + start : "lines " + start + "–" + end; }

  function rowOf(table, side, line) {
    const cell = table && table.querySelector('td.num[data-side="' + side + '"][data-line="' + line + '"]');
    return cell ? cell.closest("tr") : null;
  }

  function drawSelection(root) {
    root.querySelectorAll(".sel").forEach(function (cell) { cell.classList.remove("sel"); });
    root.querySelectorAll("tr.comment-form").forEach(function (row) { if (!selection) row.remove(); });
    if (!selection) return;
    const table = shownTable(selection.file);
    const split = table.classList.contains("split");
    table.querySelectorAll('td.num[data-side="' + selection.side + '"]').forEach(function (cell) {
      const line = Number(cell.dataset.line);
      if (line < selection.start || line > selection.end) return;
      cell.classList.add("sel");
      (split ? cell.nextElementSibling : cell.parentElement.lastElementChild).classList.add("sel");
    });
  }

  function select(root, cell, extend) {
    const file = cell.closest("details.file");
    const side = cell.dataset.side;
    const line = Number(cell.dataset.line);
    if (extend && selection && selection.file === file && selection.side === side) {
      selection.start = Math.min(selection.anchor, line);
      selection.end = Math.max(selection.anchor, line);
    } else {
      selection = { file: file, side: side, anchor: line, start: line, end: line };
    }
    setCurrent(root, filesOf(root).indexOf(file));
    drawSelection(root);
    openForm(root);
  }

  function openForm(root) {
    root.querySelectorAll("tr.comment-form").forEach(function (row) { row.remove(); });
    const table = shownTable(selection.file);
    const after = rowOf(table, selection.side, selection.end);
    if (!after) return;
    const where = lines(selection.start, selection.end) + " (" + selection.side + ")";
    const row = make("tr", { class: "comment-form" });
    const cell = make("td", { colspan: table.classList.contains("split") ? "4" : "3" });
    const form = make("form", { class: "stack", "hx-boost": "false" });
    const label = make("label", { for: "comment-body" }, "Comment on " + selection.file.dataset.path + " " + where);
    const body = make("textarea", { id: "comment-body", rows: "3", required: "" });
    const buttons = make("div", { class: "actions" });
    buttons.append(make("button", { type: "submit", class: "primary" }, "Add comment"),
                   make("button", { type: "button", "data-cancel": "" }, "Cancel"));
    form.append(label, body, buttons);
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      addComment(root, body.value.trim());
    });
    cell.append(form);
    row.append(cell);
    after.after(row);
    body.focus();
  }

  function addComment(root, text) {
    if (!text || !selection) return;
    const file = selection.file;
    const side = selection.side;
    const saved = comments(root);
    saved.push({ id: Date.now().toString(36) + Math.random().toString(36).slice(2, 7),
                 path: side === "old" ? file.dataset.basePath : file.dataset.path, file: file.dataset.path,
                 side: side, start_line: selection.start, end_line: selection.end, body: text });
    save(commentsKey(root), saved);
    selection = null;
    drawSelection(root);
    drawComments(root, file);
    drawList(root);
  }

  function removeComment(root, id) {
    save(commentsKey(root), comments(root).filter(function (c) { return c.id !== id; }));
    filesOf(root).forEach(function (file) { drawComments(root, file); });
    drawList(root);
  }

  function drawComments(root, file) {
    file.querySelectorAll("tr.comment").forEach(function (row) { row.remove(); });
    const table = shownTable(file);
    if (!table) return;
    comments(root).filter(function (c) { return c.file === file.dataset.path; }).forEach(function (c) {
      const row = make("tr", { class: "comment" });
      const cell = make("td", { colspan: table.classList.contains("split") ? "4" : "3" });
      const box = make("div", { class: "comment-box" });
      box.append(make("p", { class: "comment-where" }, "Your comment on " + lines(c.start_line, c.end_line) + " (" + c.side + ")"),
                 make("p", { class: "comment-body" }, c.body),
                 make("button", { type: "button", class: "link", "data-remove": c.id }, "Remove"));
      cell.append(box);
      row.append(cell);
      const after = rowOf(table, c.side, c.end_line);
      if (after) after.after(row); else table.tBodies[0].append(row);
    });
  }

  function drawList(root) {
    const panel = root.querySelector("section.comments");
    if (!panel || !root.hasAttribute("data-can-send")) return;
    panel.hidden = false;
    const list = panel.querySelector("[data-comments-list]");
    const saved = comments(root);
    list.replaceChildren();
    const byFile = {};
    saved.forEach(function (c) { (byFile[c.file] = byFile[c.file] || []).push(c); });
    Object.keys(byFile).forEach(function (path) {
      const file = filesOf(root).find(function (f) { return f.dataset.path === path; });
      list.append(make("h3", { class: "path" }, path));
      const items = make("ul", { class: "comment-list" });
      byFile[path].forEach(function (c) {
        const item = make("li");
        const link = make("a", { href: "#" + (file ? file.id : "") }, lines(c.start_line, c.end_line) + " (" + c.side + ")");
        item.append(link, document.createTextNode(": " + c.body + " "),
                    make("button", { type: "button", class: "link", "data-remove": c.id }, "Remove"));
        items.append(item);
      });
      list.append(items);
    });
    if (!saved.length) list.append(make("p", { class: "muted" }, "No comments yet."));
    const send = panel.querySelector("[data-send]");
    if (send) send.disabled = !saved.length;
  }

  async function send(root, button) {
    const panel = root.querySelector("section.comments");
    const failed = panel.querySelector("[data-send-error]");
    const body = { text: panel.querySelector("[data-comments-text]").value.trim(),
                   attempt: Number(root.dataset.attempt),
                   comments: comments(root).map(function (c) {
                     return { path: c.path, side: c.side, start_line: c.start_line, end_line: c.end_line, body: c.body };
                   }) };
    button.disabled = true;
    failed.hidden = true;
    let response;
    let answer = {};
    try {
      response = await fetch(root.dataset.followup, {
        method: "POST", body: JSON.stringify(body), credentials: "same-origin",
        headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRF-Token": root.dataset.csrf } });
      answer = await response.json().catch(function () { return {}; });
    } catch (error) {
      answer = { detail: "the server could not be reached: " + error.message };
    }
    if (response && response.ok) {
      forgetComments(root);
      // An accepted task's follow-up is a new task (it names its parent): go there; else to this task.
      window.location.assign(answer.parent_id && answer.id ? "/tasks/" + encodeURIComponent(answer.id) : root.dataset.done);
      return;
    }
    failed.textContent = "Not sent (your comments are kept): " + (answer.detail || (response && response.statusText) || "unknown error");
    failed.hidden = false;
    button.disabled = false;
  }

  // ---------------------------------------------------------------- wiring

  function onClick(root, event) {
    const target = event.target instanceof Element ? event.target : null;
    if (!target) return;
    const expander = target.closest("button.expand");
    const loader = target.closest("a[data-load-diff]");
    if (loader) {
      event.preventDefault();
      loadFile(root, loader.closest("details.file"));
      return;
    }
    const number = target.closest("td.num[data-line]");
    const link = target.closest(".tree-file a");
    if (expander) {
      expand(root, expander.closest("details.file"), Number(expander.dataset.gap), expander);
    } else if (target.closest("button[data-layout]")) {
      setLayout(root, target.closest("button[data-layout]").dataset.layout);
    } else if (number && root.hasAttribute("data-can-send")) {  // comments only where they can be sent
      event.preventDefault();
      select(root, number, event.shiftKey);
    } else if (target.closest("[data-cancel]")) {
      selection = null;
      drawSelection(root);
    } else if (target.closest("[data-remove]")) {
      removeComment(root, target.closest("[data-remove]").dataset.remove);
    } else if (target.closest("[data-send]")) {
      send(root, target.closest("[data-send]"));
    } else if (target.closest("[data-keys]")) {
      root.querySelector("dialog.keys-help").showModal();
    } else if (target.closest("dialog [data-close]")) {
      target.closest("dialog").close();
    } else if (link) {
      const file = document.getElementById(link.getAttribute("href").slice(1));
      if (file) { file.open = true; setCurrent(root, filesOf(root).indexOf(file)); }
    }
  }

  function init() {
    const root = document.querySelector("[data-review]:not([data-ready])");
    if (!root) return;
    root.dataset.ready = "1";
    current = -1;
    selection = null;
    root.querySelectorAll("[hidden].layout-switch, [hidden][data-keys], label.viewed[hidden]").forEach(function (element) {
      element.hidden = false;
    });
    const marks = load(viewedKey(root), {});
    filesOf(root).forEach(function (file) {
      const viewed = marks[file.dataset.path] === file.dataset.digest;  // a changed file is unread again
      showViewed(root, file, viewed);
      if (viewed) file.open = false;
      drawExpanders(root, file);
    });
    const box = root.querySelector(".tree-box");
    if (box && window.matchMedia("(max-width: 860px)").matches) box.open = false;
    root.addEventListener("click", function (event) { onClick(root, event); });
    root.addEventListener("toggle", function (event) {  // "toggle" does not bubble: caught on its way down
      const file = event.target;
      if (file instanceof HTMLDetailsElement && file.open && file.dataset.load) loadFile(root, file);
    }, true);
    root.addEventListener("change", function (event) {
      const target = event.target;
      if (target instanceof HTMLInputElement && target.matches("input[data-viewed]")) {
        markViewed(root, target.closest("details.file"), target.checked);
      }
    });
    setLayout(root, load(LAYOUT_KEY, "unified") === "split" ? "split" : "unified");
    drawList(root);
  }

  document.addEventListener("keydown", onKey);
  document.addEventListener("DOMContentLoaded", init);
  document.addEventListener("htmx:load", init);
  document.addEventListener("htmx:afterSettle", init);
})();
