# Sourced by setup.sh when TensorFlow is installed: Horovod 0.28.1's TensorFlow part against TF >= 2.19.
#
# Why (no Horovod source is patched): horovod/tensorflow/xla_mpi_ops.cc includes
#  - highwayhash/ and farmhash.h, which TF's wheel ships under include/external/highwayhash and
#    include/external/farmhash_archive/src but leaves off the include path it reports;
#  - tensorflow/compiler/xla/client/xla_builder.h, which TF >= 2.19 moved to xla/hlo/builder/xla_builder.h:
#    a one-line stand-in at the old path includes the new one (Horovod's main branch includes the new path).
# The stand-in lives in a folder of its own under the build's temporary directory, only on this build's path.
tf_include="$("$py" -c 'import tensorflow as tf; print(tf.sysconfig.get_include())' 2>/dev/null)" \
    || die "TensorFlow is installed in $venv but does not import; reinstall it (make setup-tf)"
shim="$(mktemp -d "${TMPDIR:-/tmp}/horovod-tf-headers.XXXXXX")"
mkdir -p "$shim/tensorflow/compiler/xla/client"
if [ -f "$tf_include/xla/hlo/builder/xla_builder.h" ]; then
    echo '#include "xla/hlo/builder/xla_builder.h"  // moved in TF >= 2.19' \
        >"$shim/tensorflow/compiler/xla/client/xla_builder.h"
fi
export CPLUS_INCLUDE_PATH="$shim:$tf_include/external/highwayhash:$tf_include/external/farmhash_archive/src${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}"
export HOROVOD_WITH_TENSORFLOW=1
unset HOROVOD_WITHOUT_TENSORFLOW
