# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# cmake -DPROVIDER=<libtrdma-rdmav34.so> -DREADELF=<readelf> -P <this file>
#
# Checks the built provider the way libibverbs will see it:
#  - the file is named lib<name>-rdmav34.so, as "driver trdma" resolves to;
#  - it needs libibverbs.so.1;
#  - the private libibverbs entry points it uses are bound to
#    IBVERBS_PRIVATE_34 (rdma-core v34..v56), verbs_register_driver_34
#    included, and any other libibverbs symbol to some IBVERBS_* version;
#  - it references ibv_query_qp_data_in_order@IBVERBS_1.14, which keeps it
#    from loading into rdma-core v34/v35 (see provider/trdma.c);
#  - it exports nothing (-fvisibility=hidden, registration by constructor).

cmake_minimum_required(VERSION 3.18)

foreach(var PROVIDER READELF)
  if(NOT ${var})
    message(FATAL_ERROR "${var} not set")
  endif()
endforeach()

get_filename_component(name "${PROVIDER}" NAME)
if(NOT name STREQUAL "libtrdma-rdmav34.so")
  message(FATAL_ERROR "provider is named ${name}, libibverbs loads libtrdma-rdmav34.so")
endif()

execute_process(COMMAND ${READELF} --wide --dynamic "${PROVIDER}"
  OUTPUT_VARIABLE dynamic RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "readelf --dynamic failed")
endif()
if(NOT dynamic MATCHES "\\(NEEDED\\)[^\n]*\\[libibverbs\\.so\\.1\\]")
  message(FATAL_ERROR "provider does not need libibverbs.so.1:\n${dynamic}")
endif()

execute_process(COMMAND ${READELF} --wide --dyn-syms "${PROVIDER}"
  OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "readelf --dyn-syms failed")
endif()

set(required
  verbs_register_driver_34
  _verbs_init_and_alloc_context
  verbs_uninit_context
  verbs_set_ops
  ibv_cmd_get_context
  ibv_cmd_query_device_any
  ibv_cmd_query_port
  ibv_read_ibdev_sysfs_file
  ibv_cmd_alloc_pd
  ibv_cmd_dealloc_pd
  ibv_cmd_reg_mr
  ibv_cmd_rereg_mr
  ibv_cmd_dereg_mr
  ibv_cmd_advise_mr
  ibv_cmd_reg_dmabuf_mr
  ibv_cmd_alloc_mw
  ibv_cmd_dealloc_mw
  ibv_cmd_create_cq
  ibv_cmd_req_notify_cq
  ibv_cmd_resize_cq
  ibv_cmd_destroy_cq
  verbs_init_cq
  ibv_cmd_create_srq
  ibv_cmd_modify_srq
  ibv_cmd_query_srq
  ibv_cmd_destroy_srq
  ibv_cmd_create_qp
  ibv_cmd_query_qp
  ibv_cmd_modify_qp
  ibv_cmd_destroy_qp
  ibv_cmd_post_send
  ibv_cmd_post_recv
  ibv_cmd_create_ah
  ibv_cmd_destroy_ah)

set(errors "")
set(seen "")
string(REPLACE "\n" ";" lines "${syms}")
foreach(line IN LISTS lines)
  # Num: Value Size Type Bind Vis Ndx Name[@version] [(n)]
  if(NOT line MATCHES "^ *[0-9]+: +[0-9a-f]+ +[0-9]+ +([A-Z_]+) +([A-Z_]+) +([A-Z_]+) +([A-Z0-9_]+) +([^ ]+)")
    continue()
  endif()
  set(type "${CMAKE_MATCH_1}")
  set(bind "${CMAKE_MATCH_2}")
  set(ndx "${CMAKE_MATCH_4}")
  set(sym "${CMAKE_MATCH_5}")
  if(bind STREQUAL "LOCAL" OR type STREQUAL "SECTION")
    continue()
  endif()
  if(NOT ndx STREQUAL "UND")
    string(APPEND errors "exports ${sym}\n")
    continue()
  endif()
  string(REGEX REPLACE "@.*" "" base "${sym}")
  if(base IN_LIST required)
    list(APPEND seen "${base}")
    if(NOT sym STREQUAL "${base}@IBVERBS_PRIVATE_34")
      string(APPEND errors "${sym} is not bound to IBVERBS_PRIVATE_34\n")
    endif()
  elseif(base MATCHES "^(_?_?verbs_|ibv_)" AND NOT sym MATCHES "@IBVERBS_")
    # Anything else from libibverbs must still carry a symbol version.
    string(APPEND errors "${sym} has no IBVERBS_* symbol version\n")
  endif()
endforeach()

foreach(sym IN LISTS required)
  if(NOT sym IN_LIST seen)
    string(APPEND errors "does not import ${sym}\n")
  endif()
endforeach()
if(NOT syms MATCHES " UND ibv_query_qp_data_in_order@IBVERBS_1\\.14[ \n]")
  string(APPEND errors "does not bind ibv_query_qp_data_in_order@IBVERBS_1.14\n")
endif()

if(errors)
  message(FATAL_ERROR "${PROVIDER}:\n${errors}")
endif()
message(STATUS "${name}: imports ${seen} @IBVERBS_PRIVATE_34, exports nothing")
