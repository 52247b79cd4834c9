// The collector library's path in the build tree, kept out of the launcher's own compile (collector_build_path.cpp).
#pragma once

namespace stepscope::collector {

const char* collector_build_path();

}  // namespace stepscope::collector
