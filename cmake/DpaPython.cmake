# SPDX-License-Identifier: Apache-2.0
# The Python interpreter the PyTorch backend is built for, and where CMake finds that
# interpreter's torch and pybind11. Included before find_package(Torch).
#
# Python3_EXECUTABLE given (python/setup.py passes the interpreter pip runs): that one.
# Otherwise the active interpreter (an activated venv's python, else python3 on PATH) when it
# imports torch, and only when it does not, Debian's /usr/bin/python3 (whose python3-torch a
# pyenv or venv python3 on PATH usually lacks).

function(_dpa_python_imports_torch python out)
  execute_process(COMMAND "${python}" -c "import torch" RESULT_VARIABLE status OUTPUT_QUIET ERROR_QUIET)
  if(status EQUAL 0)
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

if(NOT Python3_EXECUTABLE)
  set(_dpa_candidates "")
  if(DEFINED ENV{VIRTUAL_ENV} AND EXISTS "$ENV{VIRTUAL_ENV}/bin/python")
    list(APPEND _dpa_candidates "$ENV{VIRTUAL_ENV}/bin/python")
  endif()
  find_program(_dpa_path_python NAMES python3 python NO_CACHE)
  if(_dpa_path_python)
    list(APPEND _dpa_candidates "${_dpa_path_python}")
  endif()
  list(APPEND _dpa_candidates /usr/bin/python3)
  foreach(_dpa_python IN LISTS _dpa_candidates)
    if(EXISTS "${_dpa_python}")
      _dpa_python_imports_torch("${_dpa_python}" _dpa_has_torch)
      if(_dpa_has_torch)
        set(Python3_EXECUTABLE "${_dpa_python}" CACHE FILEPATH "Python that runs the PyTorch backend")
        break()
      endif()
    endif()
  endforeach()
endif()

# torch's and pybind11's CMake packages where that interpreter has them (a venv's PyPI torch
# keeps TorchConfig.cmake under site-packages/torch/share/cmake).
if(Python3_EXECUTABLE)
  execute_process(COMMAND "${Python3_EXECUTABLE}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
                  OUTPUT_VARIABLE _dpa_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE _dpa_status ERROR_QUIET)
  if(_dpa_status EQUAL 0 AND _dpa_torch_prefix AND NOT Torch_DIR)
    list(APPEND CMAKE_PREFIX_PATH "${_dpa_torch_prefix}")
  endif()
  execute_process(COMMAND "${Python3_EXECUTABLE}" -c "import pybind11; print(pybind11.get_cmake_dir())"
                  OUTPUT_VARIABLE _dpa_pybind11_dir OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE _dpa_status ERROR_QUIET)
  if(_dpa_status EQUAL 0 AND _dpa_pybind11_dir AND NOT pybind11_DIR)
    set(pybind11_DIR "${_dpa_pybind11_dir}" CACHE PATH "pybind11's CMake package (from ${Python3_EXECUTABLE})")
  endif()
endif()
