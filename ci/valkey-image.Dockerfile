# The container backend's image: valkey-server and the glibc pieces `ldd`
# lists, nothing else. ci/build-image assembles rootfs/ (binary at
# /usr/local/bin/valkey-server, libraries at the paths ldd printed, empty
# /tmp and /data) and passes LIB_PATH, the directories of those libraries.
# Built FROM scratch because no registry is reachable where ackgap is built.
FROM scratch
ARG LIB_PATH
COPY rootfs/ /
ENV LD_LIBRARY_PATH=${LIB_PATH}
WORKDIR /data
EXPOSE 6379
ENTRYPOINT ["/usr/local/bin/valkey-server"]
