# Sets gpu_present (TRUE or FALSE) for a check script (cmake -P), decided independently of the program under
# test: /dev/nvidia0, else a GPU that `nvidia-smi -L` lists.
set(gpu_present FALSE)
if(EXISTS /dev/nvidia0)
  set(gpu_present TRUE)
else()
  find_program(NVIDIA_SMI nvidia-smi)
  if(NVIDIA_SMI)
    execute_process(COMMAND ${NVIDIA_SMI} -L RESULT_VARIABLE smi_rc OUTPUT_VARIABLE smi_out ERROR_QUIET)
    if(smi_rc EQUAL 0 AND smi_out MATCHES "GPU [0-9]")
      set(gpu_present TRUE)
    endif()
  endif()
endif()
