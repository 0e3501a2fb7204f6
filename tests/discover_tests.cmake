# CTest-time ("PRE_TEST") discovery of Catch2 v2 test cases. Included by the
# <target>_include.cmake files that replayssm_discover_tests() (tests/CMakeLists.txt) generates.
#
# Unlike Catch2 v2's CatchAddTests.cmake this keeps test names containing ';' intact and runs each
# case with --warn NoTests, so a name that fails to match its test case fails instead of passing.

# Lists the test cases of `exe` (only when it is newer than `tests_file` or `include_file`) and
# writes one add_test() per case to `tests_file`. `properties`: list of test properties.
function(replayssm_catch_list_tests exe working_dir tests_file include_file properties)
  if(EXISTS "${tests_file}" AND "${tests_file}" IS_NEWER_THAN "${exe}" AND
     "${tests_file}" IS_NEWER_THAN "${include_file}")
    return()
  endif()
  execute_process(COMMAND "${exe}" --list-test-names-only
    WORKING_DIRECTORY "${working_dir}"
    OUTPUT_VARIABLE output ERROR_VARIABLE error RESULT_VARIABLE rc)
  if(NOT rc MATCHES "^[0-9]+$")  # Catch exits with the number of tests; runners may exit with 0
    message(FATAL_ERROR "Listing the tests of ${exe} failed (${rc}):\n${output}${error}")
  endif()

  set(props "")
  foreach(prop IN LISTS properties)
    string(APPEND props " [==[${prop}]==]")
  endforeach()
  string(ASCII 31 semicolon)  # keep ';' in names away from CMake's list splitting
  string(REPLACE ";" "${semicolon}" output "${output}")
  string(REGEX MATCHALL "[^\n]+" lines "${output}")
  set(script "")
  foreach(line IN LISTS lines)
    string(REPLACE "${semicolon}" ";" name "${line}")
    if(name MATCHES "^\"(#.*)\"$")  # Catch quotes names that start with '#'
      set(name "${CMAKE_MATCH_1}")
    endif()
    # Test spec matching exactly this name: backslash-escape Catch's special characters.
    string(REGEX REPLACE "([]\\\\,[\"~])" "\\\\\\1" spec "${name}")
    string(APPEND script
      "add_test([==[${name}]==] \"${exe}\" [==[${spec}]==] --warn NoTests)\n"
      "set_tests_properties([==[${name}]==] PROPERTIES WORKING_DIRECTORY \"${working_dir}\"${props})\n")
  endforeach()
  file(WRITE "${tests_file}" "${script}")
endfunction()
