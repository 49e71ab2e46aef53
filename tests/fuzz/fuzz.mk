# Fuzz targets, their replay under gcc in make test, and make fuzz (issue 9).
