# The 20k-function test library (etr_sym20k), shared by tests/symbolize and the symbolization
# benchmark: 8 generated C files of 2500 functions each (8 compile units), -g -O1. Include it
# from any directory; it defines the target once.
if(NOT TARGET etr_sym20k)
  set(ETR_SYM20K_DIR "${PROJECT_BINARY_DIR}/sym20k")
  set(srcs "")
  foreach(part RANGE 0 7)
    math(EXPR first "${part} * 2500")
    set(out "${ETR_SYM20K_DIR}/sym20k_${part}.c")
    add_custom_command(OUTPUT ${out}
      COMMAND ${CMAKE_COMMAND} -DOUT=${out} -DFIRST=${first} -DCOUNT=2500
              -P ${CMAKE_CURRENT_LIST_DIR}/gen_sym20k.cmake
      DEPENDS ${CMAKE_CURRENT_LIST_DIR}/gen_sym20k.cmake
      COMMENT "Generating sym20k_${part}.c" VERBATIM)
    list(APPEND srcs ${out})
  endforeach()
  add_library(etr_sym20k SHARED ${srcs})
  target_compile_options(etr_sym20k PRIVATE -g -O1)
  set_target_properties(etr_sym20k PROPERTIES OUTPUT_NAME etrsym20k
    LIBRARY_OUTPUT_DIRECTORY ${ETR_SYM20K_DIR})
endif()
