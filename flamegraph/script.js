// Interactive flame graph: click to zoom, search, tooltips. This script is
// static: it never contains profile data. Frame names are read from the
// DOM with textContent and written back with textContent only, so names
// are never parsed as markup or code.
(function () {
	"use strict";
	var svg = document.getElementById("fg");
	if (!svg) {
		return;
	}
	var W = +svg.getAttribute("data-width");
	var PAD = +svg.getAttribute("data-pad");
	var FONT = +svg.getAttribute("data-font");
	var ROW = +svg.getAttribute("data-row") || 16;
	var unit = svg.getAttribute("data-unit") || "samples";
	var total = +svg.getAttribute("data-total") || 0;
	var details = document.getElementById("fg-details");
	var matchedEl = document.getElementById("fg-matched");
	var tip = document.getElementById("fg-tip");
	var input = document.getElementById("fg-search-input");
	var SEARCH_FILL = "rgb(230,0,230)";

	var frames = [];
	var byId = {};
	var nodes = svg.querySelectorAll("g.f");
	for (var i = 0; i < nodes.length; i++) {
		var g = nodes[i];
		var t = g.querySelector("title").textContent;
		var nl = t.lastIndexOf("\n");
		var rect = g.querySelector("rect");
		var f = {
			g: g,
			rect: rect,
			text: g.querySelector("text"),
			name: nl >= 0 ? t.slice(0, nl) : t,
			o: +g.getAttribute("data-o"),
			v: +g.getAttribute("data-v"),
			d: +g.getAttribute("data-d"),
			fill: rect.getAttribute("fill"),
			index: i
		};
		g.setAttribute("data-i", String(i));
		frames.push(f);
		byId[g.id] = f;
	}
	var zoomed = frames.length ? frames[0] : null;
	var term = "";

	function commas(n) {
		return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
	}
	function pct(a, b) {
		return b > 0 ? (100 * a / b).toFixed(2) : "0.00";
	}
	function fit(name, w) {
		var chars = Math.floor((w - 6) / (FONT * 0.59));
		if (chars < 3) {
			return "";
		}
		if (name.length <= chars) {
			return name;
		}
		var cps = Array.from(name);
		if (cps.length <= chars) {
			return name;
		}
		return cps.slice(0, chars - 2).join("") + "..";
	}
	function place(f, x, w) {
		f.rect.setAttribute("x", x.toFixed(2));
		f.rect.setAttribute("width", w.toFixed(2));
		f.text.setAttribute("x", (x + 3).toFixed(2));
		f.text.textContent = fit(f.name, w);
		f.g.style.display = "";
	}
	function zoom(z) {
		if (!z) {
			return;
		}
		zoomed = z;
		var pw = W - 2 * PAD;
		var scale = pw / (z.v || 1);
		var top = z.d;
		for (var i = 0; i < frames.length; i++) {
			var f = frames[i];
			if (f.d < z.d) {
				if (f.o <= z.o && f.o + f.v >= z.o + z.v) {
					place(f, PAD, pw);
					f.g.classList.add("anc");
				} else {
					f.g.style.display = "none";
				}
			} else if (f.o >= z.o && f.o + f.v <= z.o + z.v) {
				place(f, PAD + (f.o - z.o) * scale, f.v * scale);
				f.g.classList.remove("anc");
				if (f.d > top) {
					top = f.d;
				}
			} else {
				f.g.style.display = "none";
			}
		}
		svg.setAttribute("data-zoom", z.index === 0 ? "" : z.g.id);
		var un = document.getElementById("fg-unzoom");
		if (un) {
			un.classList.toggle("hide", z.index === 0);
		}
		reveal(z, top);
	}
	// reveal scrolls the window so that the zoomed frame z is in view,
	// with as much as fits of what is drawn above it (its descendants, up
	// to depth top) and a little below it: two rows of ancestors, or for
	// the root the details line under the graph. The graph grows upwards
	// from the root at the bottom, so a graph taller than the window opens
	// scrolled to its bottom, where the root and the widest frames are.
	// If everything fits, the window moves as little as it can (not at
	// all when it is already in view).
	function reveal(z, top) {
		if (!z.rect.getBoundingClientRect || !window.scrollBy) {
			return;
		}
		var r = z.rect.getBoundingClientRect();
		var s = svg.getBoundingClientRect();
		var vb = svg.viewBox && svg.viewBox.baseVal;
		if (!vb || !vb.height || !s.height) {
			return;
		}
		var row = ROW * s.height / vb.height;
		var hi = r.top - (top - z.d) * row;
		var lo = Math.min(s.bottom, r.bottom + 2 * row);
		// The visible part of the window: below the search bar, which
		// stays at the top of the HTML page, and above a horizontal
		// scroll bar.
		var vt = 0;
		var bar = document.getElementById("fg-bar");
		if (bar) {
			vt = Math.max(0, bar.getBoundingClientRect().bottom);
		}
		var vh = window.innerHeight;
		var se = document.scrollingElement;
		if (se && se.clientHeight > 0 && se.clientHeight < vh) {
			vh = se.clientHeight;
		}
		var dy = 0;
		if (lo - hi > vh - vt || lo > vh) {
			dy = Math.ceil(lo - vh);
		} else if (hi < vt) {
			dy = Math.floor(hi - vt);
		}
		if (dy !== 0) {
			window.scrollBy(0, dy);
		}
	}
	// matcher: "/regexp/" or "/regexp/i" searches by regular expression
	// (as flamegraph.pl does); anything else, or an invalid expression, is
	// a case-sensitive substring.
	function matcher(s) {
		var m = /^\/(.+)\/(i?)$/.exec(s);
		if (m) {
			try {
				var re = new RegExp(m[1], m[2]);
				return function (name) { return re.test(name); };
			} catch (e) {
				// not a valid expression: fall through to substring
			}
		}
		return function (name) { return name.indexOf(s) >= 0; };
	}
	function search(s) {
		term = s || "";
		var match = matcher(term);
		var sum = 0;
		var end = -1;
		for (var i = 1; i < frames.length; i++) {
			var f = frames[i];
			if (term !== "" && match(f.name)) {
				f.rect.setAttribute("fill", SEARCH_FILL);
				// Frames are in depth-first order, so offsets never
				// decrease: a match inside an earlier match adds nothing.
				if (f.o >= end) {
					sum += f.v;
					end = f.o + f.v;
				} else if (f.o + f.v > end) {
					sum += f.o + f.v - end;
					end = f.o + f.v;
				}
			} else {
				f.rect.setAttribute("fill", f.fill);
			}
		}
		if (matchedEl) {
			matchedEl.textContent = term === "" ? "" :
				"Matched: " + pct(sum, total) + "% (" + commas(sum) + " " + unit + ")";
		}
		svg.setAttribute("data-matched", term === "" ? "" : pct(sum, total));
		if (input && input.value !== term) {
			input.value = term;
		}
	}
	function describe(f) {
		var s = f.name + "\n" + commas(f.v) + " " + unit + ", " + pct(f.v, total) + "% of all";
		if (zoomed && zoomed.index !== 0) {
			s += ", " + pct(f.v, zoomed.v) + "% of zoomed frame";
		}
		return s;
	}
	function frameOf(el) {
		while (el && el !== svg) {
			if (el.getAttribute && el.getAttribute("data-i") !== null) {
				return frames[+el.getAttribute("data-i")];
			}
			el = el.parentNode;
		}
		return null;
	}
	function setHash() {
		var parts = [];
		if (zoomed && zoomed.index !== 0) {
			parts.push("zoom=" + zoomed.g.id);
		}
		if (term !== "") {
			parts.push("search=" + encodeURIComponent(term));
		}
		try {
			history.replaceState(null, "", parts.length ? "#" + parts.join("&") : location.pathname + location.search);
		} catch (e) {
			// file:// documents may refuse; the view still works.
		}
	}
	function fromHash() {
		var h = location.hash.replace(/^#/, "");
		var z = frames[0];
		var s = "";
		h.split("&").forEach(function (kv) {
			var eq = kv.indexOf("=");
			if (eq < 0) {
				return;
			}
			var k = kv.slice(0, eq);
			var v;
			try {
				v = decodeURIComponent(kv.slice(eq + 1));
			} catch (e) {
				return;
			}
			if (k === "zoom" && Object.prototype.hasOwnProperty.call(byId, v)) {
				z = byId[v];
			} else if (k === "search") {
				s = v;
			}
		});
		zoom(z);
		search(s);
	}

	svg.addEventListener("click", function (ev) {
		var f = frameOf(ev.target);
		if (f) {
			zoom(f);
			setHash();
		}
	});
	svg.addEventListener("mouseover", function (ev) {
		var f = frameOf(ev.target);
		if (!f) {
			return;
		}
		var s = describe(f);
		if (details) {
			details.textContent = s.replace("\n", " — ");
		}
		if (tip) {
			tip.textContent = s;
			tip.style.display = "block";
		}
	});
	svg.addEventListener("mousemove", function (ev) {
		if (tip && tip.style.display === "block") {
			var x = ev.clientX + 14;
			var y = ev.clientY + 14;
			var r = tip.getBoundingClientRect();
			if (x + r.width > window.innerWidth) {
				x = Math.max(0, ev.clientX - r.width - 14);
			}
			if (y + r.height > window.innerHeight) {
				y = Math.max(0, ev.clientY - r.height - 14);
			}
			tip.style.left = x + "px";
			tip.style.top = y + "px";
		}
	});
	svg.addEventListener("mouseout", function (ev) {
		if (frameOf(ev.target)) {
			if (details) {
				details.textContent = " ";
			}
			if (tip) {
				tip.style.display = "none";
			}
		}
	});
	function on(id, fn) {
		var el = document.getElementById(id);
		if (el) {
			el.addEventListener("click", fn);
		}
	}
	on("fg-unzoom", function () {
		zoom(frames[0]);
		setHash();
	});
	on("fg-search-btn", function () {
		if (input) {
			input.focus();
			return;
		}
		var s = window.prompt("Search frames (substring, case-sensitive; /regexp/ or /regexp/i):", term);
		if (s !== null) {
			search(s);
			setHash();
		}
	});
	on("fg-clear", function () {
		search("");
		setHash();
	});
	if (input) {
		input.addEventListener("input", function () {
			search(input.value);
			setHash();
		});
	}
	document.addEventListener("keydown", function (ev) {
		if (ev.key === "Escape") {
			search("");
			zoom(frames[0]);
			setHash();
		}
	});
	window.addEventListener("hashchange", fromHash);
	fromHash();
	svg.setAttribute("data-ready", "1");
})();
