# Runs hta_compare.py on traces whose figures share HTA's definitions (no GPU work without its launch, whole-µs
# timestamps or HTA's rounding off): every figure must agree. SKIPPED without the HTA venv or the traces.
if(NOT EXISTS "${HTA_PY}")
  message("SKIPPED: no Holistic Trace Analysis venv at ${HTA_PY} (scripts/python-env.sh makes it)")
  return()
endif()
if(NOT IS_DIRECTORY "${TRACES}/hta")
  message("SKIPPED: no shared traces at ${TRACES}")
  return()
endif()
foreach(only hta/gpu_user_annotation_steps hta/alexnet_a100 kineto/resnet50_num_workers_4 hta/cuda_event_sync)
  execute_process(COMMAND ${PY} ${SCRIPT} --stepscope ${STEPSCOPE} --traces ${TRACES} --hta-python ${HTA_PY}
                          --only ${only}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "hta_compare on ${only}: exit ${rc}")
  endif()
  if(NOT out MATCHES "([1-9][0-9]*) of ([0-9]+) figures agree")
    message(FATAL_ERROR "hta_compare on ${only}: no figures compared")
  endif()
endforeach()
