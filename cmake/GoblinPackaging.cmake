# The Debian package of Goblin (CPack DEB): every executable, libgoblin with its headers,
# CMake package and pkg-config file, and the deployment helpers in /usr/lib/goblin
# (goblin-service, pin_pci_irqs_to_numa.sh, audit_process_numa.sh). `cpack -G DEB` in a
# build directory writes goblin_<version>_<arch>.deb; the Ansible role `goblin` installs it.
# Build it for the fleet's CPUs, not this one: -DGOBLIN_ARCH=x86-64-v2 (or v3).
install(PROGRAMS ${PROJECT_SOURCE_DIR}/scripts/goblin-service
                 ${PROJECT_SOURCE_DIR}/bench/pin_pci_irqs_to_numa.sh
                 ${PROJECT_SOURCE_DIR}/bench/audit_process_numa.sh
        DESTINATION lib/goblin)

# A version per commit (0.1.0+git<count>.<hash>, read at configure time), so a deployment
# of a newer build is seen as an upgrade by apt and Ansible.
set(GOBLIN_PACKAGE_VERSION ${PROJECT_VERSION})
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-list --count HEAD
                  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR} OUTPUT_VARIABLE _count
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc1)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=8 HEAD
                  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR} OUTPUT_VARIABLE _hash
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc2)
  if(_rc1 EQUAL 0 AND _rc2 EQUAL 0)
    set(GOBLIN_PACKAGE_VERSION "${PROJECT_VERSION}+git${_count}.${_hash}")
  endif()
endif()
set(CPACK_PACKAGE_VERSION ${GOBLIN_PACKAGE_VERSION})
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME goblin)
set(CPACK_PACKAGE_VENDOR "Goblin")
set(CPACK_PACKAGE_CONTACT "Goblin developers <goblin@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "RDMA-first large-object cache and pub/sub appliance (goblin-core, goblin-gateway, tools)")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_BINARY_DIR}/client)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "numactl")
set(CPACK_STRIP_FILES ON)
include(CPack)
