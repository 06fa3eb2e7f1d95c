// What every server binary does around its services: report the ports it bound (port 0 picks
// a free one, so launchers and tests read them from a file), wait for SIGTERM/SIGINT, and lift
// its open-file limit.
#pragma once

#include <string>

#include "common/json.h"
#include "common/status.h"

namespace yoco {

// Writes `fields` (a JSON object such as {"grpc_port": 7000, "metrics_port": 9090}) to `path`
// whole, then renames it into place: a reader never sees half a file.
Status write_port_file(const std::string& path, const Json& fields);

// SIGTERM and SIGINT only set a flag from now on (install early: a signal during model loading
// must not kill the process before it can drain).
void install_shutdown_signal_handlers();
// Installs the handlers if needed and blocks until one of those signals arrives.
void wait_for_shutdown_signal();

// Raises the soft RLIMIT_NOFILE to the hard limit and returns the soft limit now in force (-1:
// unlimited). A server holds a descriptor per client connection, and the soft default (1024 for
// systemd services and containerd 2.x containers) is far below what the hard limit allows.
long raise_open_file_limit();

}  // namespace yoco
