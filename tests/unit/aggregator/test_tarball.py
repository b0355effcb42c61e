import io
import shutil
import subprocess
import tarfile
import time

import pytest

from flud.aggregator.tarball import BLOCK_SIZE, END_OF_ARCHIVE, MAX_NAME_LENGTH, TarWriter
from tests.unit.aggregator.tar_members import parse_members
from tests.unit.aggregator.fakes import blake2b_32, file_bytes

# Sizes around block boundaries: empty, partial, exact, one over.
SIZES = [0, 1, 511, 512, 513, 1024, 5000]
BENCH_MEMBERS = 5000
BENCH_MEMBER_SIZE = 1024
MIN_MEMBERS_PER_SECOND = 20_000


def _sample_tar():
    writer = TarWriter()
    expected = []
    for i, size in enumerate(SIZES):
        data = file_bytes(i, size)
        name = blake2b_32(data + bytes([i])).hex()
        offset, length = writer.add(name, data, mtime=1_700_000_000 + i)
        expected.append((name, offset, length, data))
    return writer, expected


def test_add_reports_data_offset_and_size_grows_by_whole_blocks():
    writer, expected = _sample_tar()
    assert writer.size % BLOCK_SIZE == 0
    for name, offset, length, data in expected:
        assert offset % BLOCK_SIZE == 0
        assert length == len(data)
    sealed = writer.seal()
    assert len(parse_members(sealed)) == len(SIZES)
    assert len(sealed) == writer_size_before_seal(expected) + len(END_OF_ARCHIVE)
    assert sealed.endswith(END_OF_ARCHIVE)
    for name, offset, length, data in expected:
        assert sealed[offset:offset + length] == data


def writer_size_before_seal(expected):
    return sum(BLOCK_SIZE + -(-len(data) // BLOCK_SIZE) * BLOCK_SIZE
               for _, _, _, data in expected)


def test_python_tarfile_reads_names_sizes_offsets_and_data():
    writer, expected = _sample_tar()
    sealed = writer.seal()
    with tarfile.open(fileobj=io.BytesIO(sealed), mode="r:") as archive:
        members = archive.getmembers()
        assert [m.name for m in members] == [e[0] for e in expected]
        for member, (name, offset, length, data) in zip(members, expected):
            assert member.isfile()
            assert member.size == length
            assert member.offset_data == offset
            assert member.mode == 0o644
            assert archive.extractfile(member).read() == data
    assert [m.mtime for m in members] == [1_700_000_000 + i
                                          for i in range(len(SIZES))]


def test_parse_members_matches_tarfile_offsets():
    writer, expected = _sample_tar()
    sealed = writer.seal()
    parsed = parse_members(sealed)
    with tarfile.open(fileobj=io.BytesIO(sealed), mode="r:") as archive:
        from_tarfile = [(m.name, m.offset_data, m.size)
                        for m in archive.getmembers()]
    assert parsed == from_tarfile == [e[:3] for e in expected]


def test_parse_members_reads_a_tar_written_by_tarfile():
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as out:
        for i, size in enumerate(SIZES):
            info = tarfile.TarInfo(f"m{i}")
            info.size = size
            out.addfile(info, io.BytesIO(file_bytes(i, size)))
    data = buffer.getvalue()
    parsed = parse_members(data)
    assert [(name, length) for name, _, length in parsed] == \
        [(f"m{i}", size) for i, size in enumerate(SIZES)]
    for i, (_, offset, length) in enumerate(parsed):
        assert data[offset:offset + length] == file_bytes(i, SIZES[i])


@pytest.mark.skipif(shutil.which("tar") is None, reason="no tar command")
def test_tar_command_lists_members(tmp_path):
    writer, expected = _sample_tar()
    path = tmp_path / "sealed.tar"
    path.write_bytes(writer.seal())
    listing = subprocess.run(["tar", "-tvf", str(path)], capture_output=True,
                             text=True, check=True, timeout=30)
    assert listing.stderr == ""
    lines = listing.stdout.splitlines()
    assert len(lines) == len(expected)
    for line, (name, _, length, _) in zip(lines, expected):
        fields = line.split()
        assert fields[0] == "-rw-r--r--"
        assert fields[2] == str(length)
        assert fields[-1] == name
    extract_dir = tmp_path / "out"
    extract_dir.mkdir()
    subprocess.run(["tar", "-xf", str(path), "-C", str(extract_dir)],
                   check=True, timeout=30)
    for name, _, _, data in expected:
        assert (extract_dir / name).read_bytes() == data


def test_empty_sealed_tar_has_only_end_blocks():
    sealed = TarWriter().seal()
    assert sealed == END_OF_ARCHIVE
    assert parse_members(sealed) == []


def test_bad_checksum_is_refused():
    writer, _ = _sample_tar()
    corrupt = bytearray(writer.seal())
    corrupt[10] ^= 0x01  # a byte of the first member's name
    with pytest.raises(ValueError, match="checksum"):
        parse_members(bytes(corrupt))


def test_truncated_tar_is_refused():
    writer, expected = _sample_tar()
    sealed = writer.seal()
    last_offset = expected[-1][1]
    with pytest.raises(ValueError, match="truncated"):
        parse_members(sealed[:last_offset + 10])
    with pytest.raises(ValueError, match="truncated"):
        parse_members(sealed[:-len(END_OF_ARCHIVE)])


def test_non_file_member_is_refused():
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as out:
        info = tarfile.TarInfo("a-directory")
        info.type = tarfile.DIRTYPE
        out.addfile(info)
    with pytest.raises(ValueError, match="not a plain file"):
        parse_members(buffer.getvalue())


@pytest.mark.parametrize("name", ["", "x" * (MAX_NAME_LENGTH + 1), "nul\0",
                                  "caf\u00e9"])
def test_bad_names_are_refused(name):
    with pytest.raises(ValueError, match="name"):
        TarWriter().add(name, b"data")


def test_longest_name_fits():
    writer = TarWriter()
    writer.add("n" * MAX_NAME_LENGTH, b"data")
    assert parse_members(writer.seal())[0][0] == "n" * MAX_NAME_LENGTH


def test_negative_mtime_is_refused():
    with pytest.raises(ValueError, match="mtime"):
        TarWriter().add("a", b"", mtime=-1)


def test_sealed_writer_refuses_more():
    writer = TarWriter()
    writer.seal()
    with pytest.raises(ValueError, match="sealed"):
        writer.add("a", b"")
    with pytest.raises(ValueError, match="sealed"):
        writer.seal()


def test_appends_faster_than_the_target():
    data = file_bytes(0, BENCH_MEMBER_SIZE)
    names = [f"{i:064x}" for i in range(BENCH_MEMBERS)]
    writer = TarWriter()
    started = time.perf_counter()
    for name in names:
        writer.add(name, data)
    elapsed = time.perf_counter() - started
    assert BENCH_MEMBERS / elapsed > MIN_MEMBERS_PER_SECOND
