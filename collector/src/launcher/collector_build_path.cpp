// The collector's path in the build tree, the launcher's last resort when no installed copy is beside it. Alone in
// its file, outside the unity batch: the path differs in every build folder (a wheel's is a new temporary one each
// time), so only this file is compiled again, not the launcher (the compiler cache keys objects by their flags).
#include "launcher/collector_build_path.h"

namespace stepscope::collector {

const char* collector_build_path() { return STEPSCOPE_COLLECTOR_BUILD_PATH; }

}  // namespace stepscope::collector
