"""A node's directories and their free space (dapo_ops/fleet/disk.py): the command run for real in a shell here,
and the parser on df -P lines as nodes print them."""

import subprocess

import pytest

from dapo_ops.errors import ParseError
from dapo_ops.fleet.disk import Space, nearest_command, parse_nearest, parse_space, space_command


def test_the_commands_find_the_nearest_existing_directory_of_each_path_with_spaces_and_quotes(tmp_path):
    odd = tmp_path / "it's a dir"
    odd.mkdir()
    asked = [str(odd / "not" / "yet"), str(tmp_path), "/"]
    nearest = subprocess.run(nearest_command(asked), shell=True, capture_output=True, text=True, check=True)
    assert parse_nearest(nearest.stdout, asked) == {asked[0]: str(odd), asked[1]: str(tmp_path), "/": "/"}
    spaces = parse_space(subprocess.run(space_command(asked), shell=True, capture_output=True, text=True,
                                        check=True).stdout, 3)
    assert [s.directory for s in spaces] == [str(odd), str(tmp_path), "/"]
    assert all(s.available > 0 and s.mount.startswith("/") for s in spaces)


def test_parse_space_reads_available_blocks_and_a_mount_point_with_spaces():
    out = ("dir /\n/dev/nvme0n1p2 960000000 400000000 560000000 42% /\n"
           "dir /mnt/shared models/v 2/x\nnas:/export/models 2000000 1500000 500000 75% /mnt/shared models/v 2\n")
    assert parse_space(out, 2) == [Space("/", "/", 560000000 * 1024),
                                   Space("/mnt/shared models/v 2/x", "/mnt/shared models/v 2", 500000 * 1024)]
    assert parse_space("", 0) == []


@pytest.mark.parametrize("line", ["/dev/sda1 100 50 50 50%",
                                  "Filesystem 1024-blocks Used Available Capacity Mounted on",
                                  "/dev/sda1 100 50 -5 50% /data",
                                  "df: /data: Permission denied"])
def test_parse_space_refuses_a_line_that_is_not_a_df_p_line(line):
    with pytest.raises(ParseError) as caught:
        parse_space(f"dir /data\n{line}\n", 1)
    assert caught.value.line == line


def test_parse_space_refuses_a_line_count_other_than_the_directories_asked():
    pair = "dir /data\n/dev/sda1 100 50 50 50% /data\n"
    with pytest.raises(ParseError, match="2 lines for 2 directories"):
        parse_space(pair, 2)
    with pytest.raises(ParseError, match="not a 'dir' line"):
        parse_space("/dev/sda1 100 50 50 50% /data\n" * 2, 1)
    with pytest.raises(ParseError, match="1 lines for 2 directories"):
        parse_nearest("/data\n", ["/a", "/b"])
