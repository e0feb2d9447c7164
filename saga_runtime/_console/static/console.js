// Reload a page that asks for it (data-refresh, in seconds), unless the person is typing in one of its fields.
(function () {
  "use strict";
  var seconds = Number(document.body.dataset.refresh || 0);
  if (!seconds) {
    return;
  }
  setInterval(function () {
    var active = document.activeElement;
    var typing = active && (active.tagName === "INPUT" || active.tagName === "SELECT" || active.tagName === "TEXTAREA");
    if (!typing && !document.hidden) {
      window.location.reload();
    }
  }, seconds * 1000);
})();

// Follow a live saga's events and streams on its page (Server-Sent Events from /api/follow/...): each new value is
// added as text (never as HTML), and the stream is closed once the saga is terminal.
(function () {
  "use strict";
  var section = document.querySelector("section.published[data-follow]");
  if (!section || !window.EventSource) {
    return;
  }
  var LIMIT = 4000; // characters of a value shown, as the page's own are
  var state = section.querySelector(".live-state");

  function shown(value) {
    var text = JSON.stringify(value, null, 2);
    if (text === undefined) {
      text = "null";
    }
    return text.length <= LIMIT ? text : text.slice(0, LIMIT - 1) + "\u2026";
  }

  function pre(value) {
    var block = document.createElement("pre");
    block.textContent = shown(value);
    return block;
  }

  function find(selector, attribute, name) {
    var found = section.querySelectorAll(selector);
    for (var i = 0; i < found.length; i++) {
      if (found[i].getAttribute(attribute) === name) {
        return found[i];
      }
    }
    return null;
  }

  function hide(selector) {
    var empty = section.querySelector(selector);
    if (empty) {
      empty.remove();
    }
  }

  function setEvent(entry) {
    var cell = find("dd[data-key]", "data-key", entry.key);
    if (!cell) {
      var term = document.createElement("dt");
      term.textContent = entry.key;
      cell = document.createElement("dd");
      cell.setAttribute("data-key", entry.key);
      var list = section.querySelector("dl.events");
      list.appendChild(term);
      list.appendChild(cell);
      hide(".no-events");
    }
    cell.replaceChildren(pre(entry.value));
  }

  function stream(name) {
    var found = find("div.stream[data-stream]", "data-stream", name);
    if (found) {
      return found;
    }
    found = document.createElement("div");
    found.className = "stream";
    found.setAttribute("data-stream", name);
    var title = document.createElement("h3");
    var label = document.createElement("span");
    label.className = "stream-name";
    label.textContent = name;
    title.appendChild(label);
    var values = document.createElement("ol");
    values.className = "values";
    values.setAttribute("start", "0");
    found.appendChild(title);
    found.appendChild(values);
    section.querySelector("div.streams").appendChild(found);
    hide(".no-streams");
    return found;
  }

  function take(entry) {
    if (entry.kind === "event") {
      setEvent(entry);
    } else if (entry.kind === "stream") {
      var item = document.createElement("li");
      item.appendChild(pre(entry.value));
      stream(entry.name).querySelector("ol.values").appendChild(item);
    } else if (entry.kind === "stream_closed") {
      var title = stream(entry.name).querySelector("h3");
      if (!title.querySelector(".closed")) {
        var closed = document.createElement("span");
        closed.className = "closed";
        closed.textContent = "closed";
        title.appendChild(document.createTextNode(" "));
        title.appendChild(closed);
      }
    }
  }

  function showStatus(status) {
    var badge = document.querySelector("h1 .status");
    if (badge && status) {
      badge.textContent = status;
      badge.className = "status s-" + status;
    }
  }

  var url = section.getAttribute("data-follow") + "?after=" + encodeURIComponent(section.getAttribute("data-after") || "0");
  var source = new EventSource(url);
  source.onmessage = function (message) {
    take(JSON.parse(message.data));
  };
  source.addEventListener("status", function (message) {
    showStatus(JSON.parse(message.data).status);
  });
  source.addEventListener("end", function (message) {
    var data = JSON.parse(message.data);
    source.close();
    showStatus(data.status);
    section.removeAttribute("data-follow");
    state.textContent = data.missing ? "the saga is no longer in the store" : "the saga has ended " + data.status + ": reload for its whole record";
  });
  // A closed tab lets go of its connection at once (browsers allow few per site).
  window.addEventListener("pagehide", function () {
    source.close();
  });
})();
