"""Build the zephon package's extensions against libzephon.

Where the library comes from, first match wins:
  ZEPHON_PREFIX=/usr/local        an installed Zephon (include/, lib/)
  ZEPHON_BUILD_DIR=../build/dev   a CMake build of this repository
  (neither, inside the repository) the repository's library is built here
                                   with CMake (Release) and shipped inside the
                                   package, found through RPATH $ORIGIN
  pkg-config zephon               otherwise
The MPI extension (zephon._mpi: mpi4py communicators, the cluster report)
is built when libzephon_mpi and Open MPI's mpicc are there.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def sh(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()


def find_library():
    """(include_dirs, library_dirs, rpath, files_to_ship)"""
    prefix = os.environ.get("ZEPHON_PREFIX")
    if prefix:
        p = Path(prefix)
        libs = [d for d in (p / "lib", p / "lib64", p / "lib" / "x86_64-linux-gnu") if d.is_dir()]
        return [str(p / "include")], [str(d) for d in libs], [str(d) for d in libs], []
    bdir = os.environ.get("ZEPHON_BUILD_DIR")
    if bdir:
        b = Path(bdir).resolve()
        return [str(REPO / "include")], [str(b)], [str(b)], []
    if (REPO / "CMakeLists.txt").is_file() and (REPO / "include" / "zephon.h").is_file():
        b = HERE / "build" / "libzephon"
        jobs = str(os.cpu_count() or 2)
        print(f"zephon: building libzephon with CMake in {b}", file=sys.stderr)
        subprocess.run(["cmake", "-S", str(REPO), "-B", str(b), "-DCMAKE_BUILD_TYPE=Release",
                        "-DZEPHON_BUILD_TESTS=OFF", "-DZEPHON_WERROR=OFF"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", str(b), "-j", jobs, "--target", "zephon"]
                       + (["zephon_mpi"] if shutil.which("mpicc") else []), check=True,
                       stdout=subprocess.DEVNULL)
        ship = sorted(str(f) for f in b.glob("libzephon*.so.*") if f.name.count(".") == 2)
        return [str(REPO / "include")], [str(b)], ["$ORIGIN"], ship
    try:
        inc = [f[2:] for f in sh(["pkg-config", "--cflags-only-I", "zephon"])]
        libd = [f[2:] for f in sh(["pkg-config", "--libs-only-L", "zephon"])]
        return inc, libd, libd, []
    except (OSError, subprocess.CalledProcessError):
        sys.exit("zephon: libzephon not found: set ZEPHON_PREFIX or ZEPHON_BUILD_DIR, or build "
                 "from the repository (pip install ./python)")


INC, LIBDIRS, RPATH, SHIP = find_library()
CFLAGS = ["-std=gnu11", "-Wall", "-Wextra", "-Wno-missing-field-initializers",
          "-Wno-cast-function-type"]
if os.environ.get("ZEPHON_EXT_WERROR") == "1":
    CFLAGS.append("-Werror")
exts = [Extension("zephon._core", ["zephon/_core.c", "zephon/_dataset.c", "zephon/_wait.c", "zephon/_runner.c", "zephon/_pipeline.c", "zephon/_batch.c"], include_dirs=INC, library_dirs=LIBDIRS,
                  runtime_library_dirs=RPATH, libraries=["zephon"], extra_compile_args=CFLAGS)]

have_mpi_lib = any(Path(d, "libzephon_mpi.so").exists() for d in LIBDIRS if d != "$ORIGIN")
if shutil.which("mpicc") and have_mpi_lib:
    mpi_inc = [f[2:] for f in sh(["mpicc", "--showme:compile"]) if f.startswith("-I")]
    mpi_libd = [f[2:] for f in sh(["mpicc", "--showme:link"]) if f.startswith("-L")]
    exts.append(Extension("zephon._mpi", ["zephon/_mpi.c"], include_dirs=INC + mpi_inc,
                          library_dirs=LIBDIRS + mpi_libd, runtime_library_dirs=RPATH + mpi_libd,
                          libraries=["zephon_mpi", "zephon", "mpi"], extra_compile_args=CFLAGS))


class BuildExt(build_ext):
    """Also copies the library built here next to the extensions."""

    def run(self):
        super().run()
        for f in SHIP:
            for dest in {Path(self.build_lib) / "zephon", HERE / "zephon"} if self.inplace else \
                    {Path(self.build_lib) / "zephon"}:
                dest.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, dest / Path(f).name)


setup(ext_modules=exts, cmdclass={"build_ext": BuildExt})
