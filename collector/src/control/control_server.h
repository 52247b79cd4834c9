// The collector's end of the control channel (control_protocol.h): a thread that waits in accept() and opens
// or closes recording windows. Costs nothing while idle (one blocked thread, one descriptor).
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace stepscope::collector {

// Recording windows, implemented by the collector. `options` come from the control channel (attach); empty
// options mean the environment's configuration (record --paused). A closed window leaves the collector dormant:
// no timers, no signals, no CUPTI activity, its partial store complete on disk.
bool open_window(const std::map<std::string, std::string>& options, std::string& error);
// "samples=N"; nothing when no window was open. False with a reason for a recording that is not a window: one
// `stepscope record` started with the process, whose threads point at their state (closing it crashed them).
bool close_window(std::string& result, std::string& error);
bool window_open();

namespace control {
// Listens at socket_path(geteuid(), getpid()). Idempotent. False with a reason when it cannot.
bool start_server(std::string& error);
bool server_running();
// The control thread's tid (0: none in this process): never sampled.
int32_t thread_id();
// At the process's exit, before the collector stops: waits (5 s at most) for a request being served — a
// window closing as the program ends — to finish and be answered; no request is served after it.
void quiesce_for_exit();
// The injector's page: unmapped at the first request (its call has returned by then).
void unmap_page_later(uint64_t page);
}  // namespace control

}  // namespace stepscope::collector
