"""lrp_lib.book.models: the shared architectures load the stored weights of the chapters that train them,
strictly, and compute what those chapters report."""
import os

import pytest
import torch
from torch_geometric.data import Batch

from lrp_lib.book.datasets.esol import esol
from lrp_lib.book.models import MutagenicityGCN, SolubilityGN
from lrp_lib.book.pretrained import load_or_train, load_record


def refuse(model):
    raise AssertionError("must load, not train")


def test_mutagenicity_gcn_loads_its_stored_weights_and_is_a_classifier():
    model = MutagenicityGCN(14, hidden=64)
    record = load_or_train("mutagenicity-gcn", model, refuse, retrain=False)
    assert record["source"] == "stored" and not model.training
    x = torch.zeros(3, 14)
    x[:, 0] = 1.0  # three carbons in a chain
    out = model(x, torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]))
    assert out.shape == (1, 1) and torch.isfinite(out).all()
    with pytest.raises(ValueError, match="do not fit"):
        load_or_train("mutagenicity-gcn", MutagenicityGCN(14, hidden=32), refuse, retrain=False)


def test_solubility_gn_reproduces_the_stored_test_rmse():
    if not os.environ.get("LRP_DATA_ROOT"):
        pytest.skip("ESOL needs LRP_DATA_ROOT (or a download)")
    model = SolubilityGN()
    load_or_train("esol-gn", model, refuse, retrain=False)
    molecules = esol()
    order = torch.randperm(len(molecules), generator=torch.Generator().manual_seed(0)).tolist()
    tenth = len(molecules) // 10  # chapter 7's split: validation, test, then training
    test = Batch.from_data_list([molecules[i] for i in order[tenth:2 * tenth]])
    with torch.no_grad():
        rmse = float((model(test) - test.y.view(-1)).pow(2).mean().sqrt())
    assert rmse == pytest.approx(load_record("esol-gn")["record"]["metrics"]["test_rmse"], abs=1e-4)
