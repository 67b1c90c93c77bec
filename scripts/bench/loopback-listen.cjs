// Preloaded into server-everything's Streamable HTTP server (node -r) by scripts/bench-load.sh.
// That server calls `app.listen(PORT)` with no host, which binds every interface; the
// benchmark must stay on loopback, so a listen() given a port and no host gets 127.0.0.1.
// CommonJS so that `-r` works on every Node the benchmark may use (20 and 22).
"use strict";
const net = require("node:net");

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const port = args[0];
  const portOnly = typeof port === "number" || (typeof port === "string" && /^\d+$/.test(port));
  if (portOnly && typeof args[1] !== "string") args.splice(1, 0, "127.0.0.1");
  return listen.apply(this, args);
};
