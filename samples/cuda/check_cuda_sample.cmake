# Runs one CUDA sample and checks its contract (cmake -P; SAMPLE=path, ARGS=list, MODE=run|bad_option).
#  - no GPU on this machine (decided independently of the sample: no /dev/nvidia0 and no `nvidia-smi -L`
#    listing): the sample must exit 3 and print "no CUDA device";
#  - a GPU present: a brief run must exit 0 and print "verification: PASS" for every verified result;
#  - MODE=bad_option: an unknown option must exit 2 with a message and --help exit 0, GPU or not.
if(NOT DEFINED MODE)
  set(MODE run)
endif()

if(MODE STREQUAL "bad_option")
  execute_process(COMMAND "${SAMPLE}" --no-such-option RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 2 OR NOT "${out}${err}" MATCHES "no-such-option")
    message(FATAL_ERROR "expected exit 2 naming --no-such-option, got ${rc}:\n${out}${err}")
  endif()
  execute_process(COMMAND "${SAMPLE}" --help RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "Usage:")
    message(FATAL_ERROR "expected --help to print the usage and exit 0, got ${rc}:\n${out}${err}")
  endif()
  message(STATUS "bad option: exit 2 as documented; --help: exit 0")
  return()
endif()

include(${CMAKE_CURRENT_LIST_DIR}/../../cmake/gpu_present.cmake)

execute_process(COMMAND "${SAMPLE}" ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "${SAMPLE} ${ARGS} -> exit ${rc}\n${out}${err}")
if(gpu_present)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "GPU present but the sample exited ${rc}")
  endif()
  if(NOT out MATCHES "verification: PASS" OR out MATCHES "verification: FAIL")
    message(FATAL_ERROR "GPU present but the verification did not pass")
  endif()
else()
  if(NOT rc EQUAL 3)
    message(FATAL_ERROR "no GPU here: expected exit 3 (no CUDA device), got ${rc}")
  endif()
  if(NOT err MATCHES "error: no CUDA device")
    message(FATAL_ERROR "no GPU here: expected an 'error: no CUDA device' line on stderr")
  endif()
  if(out MATCHES "verification:")
    message(FATAL_ERROR "no GPU here: the sample must not claim a verification")
  endif()
endif()
