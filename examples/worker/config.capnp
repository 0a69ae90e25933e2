# workerd config for the order service (examples/worker/).
#
# Bundle the worker first (workerd runs JavaScript, and resolves no npm packages):
#
#   npx esbuild examples/worker/worker.ts --bundle --format=esm --platform=neutral \
#     --main-fields=module,main --conditions=workerd,worker,browser \
#     --outfile=examples/worker/dist/worker.js
#
# then serve it, naming the inventory service in the environment:
#
#   UPSTREAM=http://127.0.0.1:9000 npx workerd serve examples/worker/config.capnp
#
# `--socket-addr http=127.0.0.1:PORT` moves the listener (test/worker.test.ts uses it
# to pick a free port).

using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [
    (name = "main", worker = .orders),
    # The worker's global fetch(). workerd's default "internet" service reaches
    # public addresses only (against SSRF); the inventory service is on this machine
    # here, so loopback ("local") is allowed too. Private networks stay closed.
    (name = "outbound", network = (allow = ["public", "local"])),
  ],
  sockets = [
    (name = "http", address = "127.0.0.1:8787", http = (), service = "main"),
  ],
);

const orders :Workerd.Worker = (
  modules = [
    (name = "worker.js", esModule = embed "dist/worker.js"),
  ],
  # Web-standard APIs only: no nodejs_compat needed.
  compatibilityDate = "2025-09-01",
  bindings = [
    # env.UPSTREAM: the inventory service's origin, from the environment variable of
    # the same name (null when it is not set).
    (name = "UPSTREAM", fromEnvironment = "UPSTREAM"),
  ],
  globalOutbound = "outbound",
);
