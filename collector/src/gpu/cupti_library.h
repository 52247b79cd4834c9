// Where libcupti is looked for, in this order: by the collector (cupti_decode.cpp's load_library) and by
// `stepscope doctor` (doctor.cpp), so the doctor reports the very library the collector will load.
// STEPSCOPE_CUPTI_LIBRARY is the build's libcupti (collector/CMakeLists.txt).
#pragma once

namespace stepscope::collector::cupti {

inline constexpr const char* kLibraryNames[] = {"libcupti.so.13", "libcupti.so", STEPSCOPE_CUPTI_LIBRARY};

}  // namespace stepscope::collector::cupti
