# etr._torch, the Python face of libetr_torch (included by integrations/python/CMakeLists.txt
# when libetr_torch is built), and the PyTorch tests that run through Python.
set(_torch_dir ${PROJECT_SOURCE_DIR}/integrations/torch)
Python3_add_library(etr_torch_python MODULE ${_torch_dir}/_torch_module.cpp)
set_target_properties(etr_torch_python PROPERTIES OUTPUT_NAME _torch
  LIBRARY_OUTPUT_DIRECTORY ${ETR_PYTHON_DIR} CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
  CXX_VISIBILITY_PRESET hidden
  INSTALL_RPATH "$ORIGIN/../../../../${CMAKE_INSTALL_LIBDIR};${CMAKE_INSTALL_FULL_LIBDIR}")
# (one libetr_torch per process: a C++ host and the Python package share its callback)
target_link_libraries(etr_torch_python PRIVATE etr_torch etr_build_flags)
install(TARGETS etr_torch_python LIBRARY DESTINATION ${ETR_PYTHON_INSTALL_DIR}/etr)

if(ETR_BUILD_TESTS AND ETR_BUILD_TOOLS)
  foreach(t side_by_side run_script held jit odd)
    add_test(NAME torch.${t}
      COMMAND ${Python3_EXECUTABLE} ${_torch_dir}/tests/test_${t}.py $<TARGET_FILE:etr_tool>)
    set_tests_properties(torch.${t} PROPERTIES LABELS "python;torch"
      ENVIRONMENT "PYTHONPATH=${PROJECT_BINARY_DIR}/python" SKIP_RETURN_CODE 77 TIMEOUT 300)
  endforeach()
endif()
